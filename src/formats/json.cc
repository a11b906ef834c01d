#include "formats/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <unordered_set>

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

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
    return;
  }
  // The lead byte carries the length in its high bits; each continuation byte carries 6 bits.
  const int continuation = cp < 0x800 ? 1 : cp < 0x10000 ? 2 : 3;
  out += static_cast<char>(((0xFF00 >> (continuation + 1)) & 0xFF) | (cp >> (6 * continuation)));
  for (int i = continuation - 1; i >= 0; --i) {
    out += static_cast<char>(0x80 | ((cp >> (6 * i)) & 0x3F));
  }
}

// Recursive descent over a string_view; pos_ is always the offset the next error would name.
class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  Value parse_document() {
    skip_whitespace();
    Value value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail_expected("end of input after the value");
    return value;
  }

 private:
  [[noreturn]] void fail_at(size_t pos, const std::string& problem) const {
    throw Error(ErrorCode::invalid_argument,
                what_ + ": invalid JSON at byte " + std::to_string(pos) + ": " + problem);
  }
  // Names what was found too, since "expected ','" alone sends people counting bytes.
  [[noreturn]] void fail_expected(const std::string& expected) const {
    std::string found = "end of input";
    if (pos_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      char buf[16];
      std::snprintf(buf, sizeof buf, c >= 0x20 && c < 0x7F ? "'%c'" : "byte 0x%02X", c);
      found = buf;
    }
    fail_at(pos_, "expected " + expected + ", found " + found);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }

  void expect(char c, const char* description) {
    if (peek() != c || at_end()) fail_expected(description);
    ++pos_;
  }

  void expect_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail_expected("a value");
    pos_ += word.size();
  }

  // depth counts the arrays and objects that enclose this value.
  Value parse_value(int depth) {
    switch (peek()) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return Value(parse_string());
      case 't': expect_literal("true"); return Value(true);
      case 'f': expect_literal("false"); return Value(false);
      case 'n': expect_literal("null"); return Value();
      default: break;
    }
    if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
    fail_expected("a value");
  }

  void check_depth(int depth) const {
    if (depth > kMaxDepth) {
      fail_at(pos_, "nesting deeper than " + std::to_string(kMaxDepth) + " arrays and objects");
    }
  }

  Value parse_array(int depth) {
    check_depth(depth);
    ++pos_;
    Array array;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return Value(std::move(array));
    }
    while (true) {
      skip_whitespace();
      array.push_back(parse_value(depth));
      skip_whitespace();
      if (peek() == ']') break;
      expect(',', "',' or ']' in array");
    }
    ++pos_;
    return Value(std::move(array));
  }

  Value parse_object(int depth) {
    check_depth(depth);
    ++pos_;
    Object object;
    // Duplicate keys are ambiguous (which one wins differs between parsers), so they are errors;
    // the set keeps the check linear for headers with thousands of tensors.
    std::unordered_set<std::string> seen;
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return Value(std::move(object));
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"' || at_end()) fail_expected("a string key");
      const size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) fail_at(key_pos, "duplicate key " + dump(Value(key)));
      skip_whitespace();
      expect(':', "':' after an object key");
      skip_whitespace();
      Value value = parse_value(depth);
      object.emplace_back(std::move(key), std::move(value));
      skip_whitespace();
      if (peek() == '}') break;
      expect(',', "',' or '}' in object");
    }
    ++pos_;
    return Value(std::move(object));
  }

  uint32_t parse_hex4() {
    uint32_t value = 0;
    const char* first = text_.data() + pos_;
    const char* last = first + std::min<size_t>(4, text_.size() - pos_);
    const auto [end, ec] = std::from_chars(first, last, value, 16);
    pos_ += end - first;  // so an error names the first character that is not a hex digit
    if (ec != std::errc() || end != first + 4) fail_expected("4 hex digits after \\u");
    return value;
  }

  // Called with pos_ just after "\u"; reads one code point, joining a surrogate pair.
  uint32_t parse_unicode_escape() {
    const size_t start = pos_ - 2;
    const uint32_t unit = parse_hex4();
    if (unit >= 0xDC00 && unit <= 0xDFFF) fail_at(start, "low surrogate without a high one");
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (text_.substr(pos_, 2) != "\\u") fail_at(start, "high surrogate without a low one");
    pos_ += 2;
    const uint32_t low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail_at(start, "high surrogate without a low one");
    return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
  }

  std::string parse_string() {
    const size_t start = pos_;
    ++pos_;
    std::string out;
    while (true) {
      if (at_end()) fail_at(start, "unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') break;
      if (c < 0x20) fail_expected("a string character (control characters must be escaped)");
      if (c != '\\') {
        const size_t length = utf8_sequence_length(text_, pos_);
        if (length == 0) fail_at(pos_, "invalid UTF-8 in string");
        out.append(text_.substr(pos_, length));
        pos_ += length;
        continue;
      }
      ++pos_;
      const char escape = peek();
      ++pos_;
      switch (escape) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, parse_unicode_escape()); break;
        default: --pos_; fail_expected("an escape (one of \"\\/bfnrtu) after '\\'");
      }
    }
    ++pos_;
    return out;
  }

  Value parse_number() {
    const size_t start = pos_;
    auto digits = [&] {
      if (peek() < '0' || peek() > '9') fail_expected("a digit");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;  // JSON forbids leading zeros, so "01" fails at the '1' as trailing garbage
    } else {
      digits();
    }
    bool integer = true;
    if (peek() == '.') {
      ++pos_;
      digits();
      integer = false;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
      integer = false;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integer) {
      int64_t i;
      const auto [end, ec] = std::from_chars(first, last, i);
      if (ec == std::errc() && end == last) return Value(i);
      // Integers beyond int64 fall back to an inexact double rather than failing.
    }
    double d;
    const auto [end, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || end != last) fail_at(start, "number out of the range of a double");
    return Value(d);
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
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
  return Parser(text, what).parse_document();
}

void dump_to(std::string& out, const Value& value) {
  switch (value.type()) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += value.as_bool() ? "true" : "false"; return;
    case Type::integer: out += std::to_string(value.as_int()); return;
    case Type::number: {
      const double d = value.as_double();
      if (!std::isfinite(d)) {
        out += "null";
        return;
      }
      char buf[32];
      const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
      const std::string_view text(buf, end - buf);
      out += text;
      // 1.0 prints as "1", which would read back as an integer.
      if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
      return;
    }
    case Type::string: dump_string(out, value.as_string()); return;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const Value& element : value.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_to(out, element);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, member] : value.as_object()) {
        if (!first) out += ',';
        first = false;
        dump_string(out, key);
        out += ':';
        dump_to(out, member);
      }
      out += '}';
      return;
    }
  }
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
