// The JSON value type the tools use for file headers (safetensors), config files and JSONL logs,
// read and written by nlohmann-json. Ours on top of it: typed accessors whose errors name the
// expected and actual type, objects that keep their key order, integers kept apart from doubles,
// and a parse stricter than nlohmann's (duplicate keys, a nesting limit, no NUL bytes).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace tpf::json {

class Value;
using Array = std::vector<Value>;
// A vector, not a map: objects keep the order their keys were written or parsed in, so headers and
// log lines come out in the order a person reads them.
using Object = std::vector<std::pair<std::string, Value>>;

// `integer` is a number written without fraction or exponent that fits in int64; every other number
// is a `number` (double), so offsets and sizes up to 2^63-1 survive a round trip exactly.
enum class Type { null, boolean, integer, number, string, array, object };
const char* type_name(Type type) noexcept;

// One JSON value. Accessors throw tpf::Error(invalid_argument) naming the expected and the actual
// type, so callers can wrap the message with their own context (file, key) and rethrow.
class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  // Any integer type; unsigned values above INT64_MAX throw rather than wrap.
  template <std::integral T>
  requires(!std::same_as<T, bool>) Value(T i) : v_(to_int64(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  Type type() const noexcept { return static_cast<Type>(v_.index()); }
  bool is_null() const noexcept { return type() == Type::null; }
  bool is_bool() const noexcept { return type() == Type::boolean; }
  bool is_int() const noexcept { return type() == Type::integer; }
  // True for integers and doubles alike.
  bool is_number() const noexcept { return is_int() || type() == Type::number; }
  bool is_string() const noexcept { return type() == Type::string; }
  bool is_array() const noexcept { return type() == Type::array; }
  bool is_object() const noexcept { return type() == Type::object; }

  bool as_bool() const;
  // Integers only: 3.0 or 1e3 are rejected rather than silently truncated.
  int64_t as_int() const;
  // Integers are converted, so "lr": 1 reads as 1.0.
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object member lookup (linear; objects are small). find returns nullptr for a missing key;
  // both throw if this is not an object, at also if the key is missing.
  const Value* find(std::string_view key) const;
  const Value& at(std::string_view key) const;
  // Array element; throws if this is not an array or the index is out of range.
  const Value& at(size_t index) const;
  // Number of elements of an array or members of an object; throws for other types.
  size_t size() const;

  // Builders: set replaces an existing member in place or appends a new one (this must be an
  // object, or null, which becomes one); push_back appends to an array (or null).
  Value& set(std::string key, Value value);
  Value& push_back(Value value);

  friend bool operator==(const Value& a, const Value& b) { return a.v_ == b.v_; }

 private:
  template <class T>
  static int64_t to_int64(T i) {
    if constexpr (std::is_unsigned_v<T>) {
      if (i > static_cast<uint64_t>(INT64_MAX)) throw_unsigned_too_large(i);
    }
    return static_cast<int64_t>(i);
  }
  [[noreturn]] static void throw_unsigned_too_large(uint64_t i);
  // The alternative T, or tpf::Error naming `expected` and the actual type.
  template <class T>
  const T& get(const char* expected) const;

  // The alternatives are in the order of Type.
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> v_;
};

// Parses exactly one JSON value (surrounding whitespace allowed, nothing else; no comments, no
// trailing commas, no NaN). Throws tpf::Error(invalid_argument) "<what>: invalid JSON at byte N
// (line L, column C): <problem>" on malformed text, invalid UTF-8, duplicate object keys, numbers
// out of double range, or nesting deeper than kMaxDepth (so hostile input cannot exhaust the stack
// of the code that walks the value). N counts from 0, L and C from 1.
inline constexpr int kMaxDepth = 128;
Value parse(std::string_view text, const std::string& what);

// Compact single-line output (suitable for JSONL). Strings are escaped so the output parses back to
// the same bytes; doubles use the shortest text that round-trips and always carry a '.' or an
// exponent so they read back as doubles. Non-finite doubles have no JSON spelling and are written
// as null, as JavaScript does, so a NaN loss does not take a training log down with it.
// Invalid UTF-8 in a string is written as U+FFFD, so the output is always valid JSON; callers for
// whom that would lose data (file headers naming tensors) refuse such strings with is_valid_utf8.
std::string dump(const Value& value);
void dump_to(std::string& out, const Value& value);

// Well-formed UTF-8 per RFC 3629 (no overlong forms, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view text) noexcept;

}  // namespace tpf::json
