#include "formats/json.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tpf/error.h"

namespace tpf::json {

namespace {

[[noreturn]] void throw_type_error(const char* expected, Type actual) {
  throw Error(ErrorCode::invalid_argument,
              std::string("json: expected ") + expected + ", got " + type_name(actual));
}

// The length of the UTF-8 sequence starting at text[pos], or 0 if it is not well formed
// (overlong forms, surrogates and code points above U+10FFFF are all rejected, per RFC 3629).
size_t utf8_sequence_length(std::string_view text, size_t pos) noexcept {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return 1;
  size_t continuation;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    continuation = 2;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    continuation = 3;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (pos + continuation >= text.size()) return 0;
  for (size_t i = 1; i <= continuation; ++i) {
    const auto byte = static_cast<unsigned char>(text[pos + i]);
    if (byte < lo || byte > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
  }
  return continuation + 1;
}

// nlohmann's parser reads through this iterator, so the builder knows how far it has read when a
// SAX event arrives (nlohmann reports a position only with its own errors).
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, const char** consumed_end)
      : at_(at), consumed_end_(consumed_end) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    *consumed_end_ = ++at_;
    return *this;
  }
  bool operator==(const CountingIterator& other) const { return at_ == other.at_; }
  bool operator!=(const CountingIterator& other) const { return at_ != other.at_; }

 private:
  const char* at_;
  const char** consumed_end_;
};

// "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error ..." -> "syntax
// error ...": the offset, line and column are added by our own message, the same for every error.
std::string nlohmann_detail(const std::string& message) {
  std::string_view text = message;
  if (text.starts_with("[json.exception.")) text.remove_prefix(text.find("] ") + 2);
  if (text.starts_with("parse error")) {
    const size_t colon = text.find(": ");
    if (colon != std::string_view::npos) text.remove_prefix(colon + 2);
  }
  return std::string(text);
}

// Builds a Value from nlohmann's SAX events, adding what nlohmann does not check: duplicate keys,
// the nesting limit and NUL bytes. nlohmann's parser itself is iterative, so deep input cannot exhaust the
// stack there; the limit protects Value's recursive destructor and the callers' recursive walks.
class ValueBuilder {
 public:
  using Sax = nlohmann::json;

  ValueBuilder(std::string_view text, const std::string& what)
      : text_(text), what_(what), consumed_end_(text.data()) {}

  Value parse() {
    // nlohmann reads a NUL byte as the end of the input, so "1\0garbage" would parse as 1. JSON
    // has no place for a raw NUL (not whitespace, not allowed unescaped in strings): refuse it.
    if (const size_t nul = text_.find('\0'); nul != std::string_view::npos) {
      refuse(nul, "a NUL byte, which JSON allows only escaped inside strings");
      fail();
    }
    const CountingIterator first(text_.data(), &consumed_end_);
    const CountingIterator last(text_.data() + text_.size(), &consumed_end_);
    if (!Sax::sax_parse(first, last, this)) fail();
    return std::move(root_);
  }

  // nlohmann's SAX interface.
  bool null() { return add(Value()); }
  bool boolean(bool value) { return add(Value(value)); }
  bool number_integer(Sax::number_integer_t value) { return add(Value(value)); }
  // Above INT64_MAX: an (inexact) double rather than an error, like any other large number.
  bool number_unsigned(Sax::number_unsigned_t value) {
    if (value > static_cast<uint64_t>(INT64_MAX)) return add(Value(static_cast<double>(value)));
    return add(Value(static_cast<int64_t>(value)));
  }
  bool number_float(Sax::number_float_t value, const std::string&) { return add(Value(value)); }
  bool string(std::string& value) { return add(Value(std::move(value))); }
  bool binary(Sax::binary_t&) { return false; }  // JSON text has no binary values
  bool start_object(size_t) { return open(Value(Object())); }
  bool key(std::string& key) {
    Frame& frame = open_.back();
    // Duplicate keys are ambiguous (which one wins differs between parsers), so they are errors;
    // the set keeps the check linear for headers with thousands of tensors.
    if (!frame.keys.insert(key).second) {
      return refuse(key_start(), "duplicate key " + dump(Value(key)));
    }
    frame.key = std::move(key);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(Value(Array())); }
  bool end_array() { return close(); }
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) {
    // nlohmann's position counts the characters read, the one that failed included; a number out
    // of range is named at its first digit.
    const bool whole_token = dynamic_cast<const nlohmann::detail::out_of_range*>(&error) != nullptr;
    const size_t offset = whole_token ? position - last_token.size() : position - 1;
    return refuse(std::min(offset, text_.size()), nlohmann_detail(error.what()));
  }

 private:
  struct Frame {
    Value container;
    std::string key;                       // objects: the key of the value to come
    std::unordered_set<std::string> keys;  // objects: every key so far
  };

  size_t consumed() const { return static_cast<size_t>(consumed_end_ - text_.data()); }

  // Called at a key's closing quote: back to its opening quote, the first one not escaped.
  size_t key_start() const {
    size_t pos = consumed() - 1;
    while (pos > 0) {
      --pos;
      if (text_[pos] != '"') continue;
      size_t backslashes = 0;
      while (pos > backslashes && text_[pos - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return pos;
    }
    return pos;
  }

  bool open(Value container) {
    // Called just after the '[' or '{' has been read.
    if (open_.size() >= static_cast<size_t>(kMaxDepth)) {
      return refuse(consumed() - 1,
                    "nesting deeper than " + std::to_string(kMaxDepth) + " arrays and objects");
    }
    open_.push_back(Frame{std::move(container), {}, {}});
    return true;
  }

  bool close() {
    Value done = std::move(open_.back().container);
    open_.pop_back();
    return add(std::move(done));
  }

  bool add(Value value) {
    if (open_.empty()) {
      root_ = std::move(value);
    } else if (Frame& frame = open_.back(); frame.container.is_array()) {
      frame.container.as_array().push_back(std::move(value));
    } else {
      frame.container.as_object().emplace_back(std::move(frame.key), std::move(value));
    }
    return true;
  }

  // Records the first error and stops the parse (a SAX callback that returns false ends it).
  bool refuse(size_t offset, std::string problem) {
    error_offset_ = offset;
    problem_ = std::move(problem);
    return false;
  }

  // "<what>: invalid JSON at byte N (line L, column C): <problem>"; line and column count from 1.
  [[noreturn]] void fail() const {
    const std::string_view before = text_.substr(0, error_offset_);
    const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
    const size_t line_start = before.rfind('\n');
    const size_t column =
        error_offset_ - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1;
    throw Error(ErrorCode::invalid_argument,
                what_ + ": invalid JSON at byte " + std::to_string(error_offset_) + " (line " +
                    std::to_string(line) + ", column " + std::to_string(column) + "): " + problem_);
  }

  std::string_view text_;
  const std::string& what_;
  const char* consumed_end_;
  std::vector<Frame> open_;  // the arrays and objects being read, innermost last
  Value root_;
  size_t error_offset_ = 0;
  std::string problem_;
};

// The writer is nlohmann's: doubles in the shortest text that reads back to the same value (with
// ".0" when integral, so they stay doubles), NaN and infinities as null, ordered objects as ours.
nlohmann::ordered_json to_nlohmann(const Value& value) {
  switch (value.type()) {
    case Type::null: return nullptr;
    case Type::boolean: return value.as_bool();
    case Type::integer: return value.as_int();
    case Type::number: return value.as_double();
    case Type::string: return value.as_string();
    case Type::array: {
      nlohmann::ordered_json array = nlohmann::ordered_json::array();
      for (const Value& element : value.as_array()) array.push_back(to_nlohmann(element));
      return array;
    }
    case Type::object: {
      nlohmann::ordered_json object = nlohmann::ordered_json::object();
      for (const auto& [key, member] : value.as_object()) object[key] = to_nlohmann(member);
      return object;
    }
  }
  return nullptr;
}

}  // namespace

const char* type_name(Type type) noexcept {
  switch (type) {
    case Type::null: return "null";
    case Type::boolean: return "bool";
    case Type::integer: return "integer";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::array: return "array";
    case Type::object: return "object";
  }
  return "invalid";
}

void Value::throw_unsigned_too_large(uint64_t i) {
  throw Error(ErrorCode::invalid_argument,
              "json: integer " + std::to_string(i) + " does not fit in int64");
}

template <class T>
const T& Value::get(const char* expected) const {
  if (!std::holds_alternative<T>(v_)) throw_type_error(expected, type());
  return std::get<T>(v_);
}

bool Value::as_bool() const { return get<bool>("bool"); }
int64_t Value::as_int() const { return get<int64_t>("integer"); }
double Value::as_double() const {
  return is_int() ? static_cast<double>(as_int()) : get<double>("number");
}
const std::string& Value::as_string() const { return get<std::string>("string"); }
const Array& Value::as_array() const { return get<Array>("array"); }
Array& Value::as_array() { return const_cast<Array&>(get<Array>("array")); }
const Object& Value::as_object() const { return get<Object>("object"); }
Object& Value::as_object() { return const_cast<Object&>(get<Object>("object")); }

const Value* Value::find(std::string_view key) const {
  for (const auto& [name, value] : as_object()) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  if (const Value* value = find(key)) return *value;
  throw Error(ErrorCode::invalid_argument, "json: missing key " + dump(Value(key)) + " in object");
}

const Value& Value::at(size_t index) const {
  const Array& array = as_array();
  if (index >= array.size()) {
    throw Error(ErrorCode::invalid_argument, "json: index " + std::to_string(index) +
                                                 " out of range for an array of " +
                                                 std::to_string(array.size()));
  }
  return array[index];
}

size_t Value::size() const {
  if (is_array()) return std::get<Array>(v_).size();
  return as_object().size();
}

Value& Value::set(std::string key, Value value) {
  if (is_null()) v_ = Object();
  for (auto& [name, existing] : as_object()) {
    if (name == key) return existing = std::move(value);
  }
  return as_object().emplace_back(std::move(key), std::move(value)).second;
}

Value& Value::push_back(Value value) {
  if (is_null()) v_ = Array();
  return as_array().emplace_back(std::move(value));
}

Value parse(std::string_view text, const std::string& what) {
  return ValueBuilder(text, what).parse();
}

void dump_to(std::string& out, const Value& value) {
  // Invalid UTF-8 is written as U+FFFD, so the output is always valid JSON.
  out += to_nlohmann(value).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

bool is_valid_utf8(std::string_view text) noexcept {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

std::string dump(const Value& value) {
  std::string out;
  dump_to(out, value);
  return out;
}

}  // namespace tpf::json
