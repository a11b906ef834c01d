#include "model/parse_number.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tpf/error.h"

namespace tpf {

std::string range_text(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max()) return ">= " + std::to_string(lo);
  return "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

namespace {

std::string real_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

[[noreturn]] void fail(const std::string& what, const std::string& expected,
                       std::string_view text) {
  throw Error(ErrorCode::invalid_argument,
              what + " must be " + expected + ", got '" + std::string(text) + "'");
}

// from_chars accepts a leading '-' but no '+' or space; a leading '-' is fine for signed values.
template <typename T>
bool parse_whole(std::string_view text, T& value) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

int64_t parse_integer(std::string_view text, int64_t min_value, int64_t max_value,
                      const std::string& what) {
  int64_t v = 0;
  if (!parse_whole(text, v) || v < min_value || v > max_value) {
    fail(what, "an integer " + range_text(min_value, max_value), text);
  }
  return v;
}

uint64_t parse_unsigned(std::string_view text, uint64_t max_value, const std::string& what) {
  uint64_t v = 0;
  if (!parse_whole(text, v) || v > max_value) {
    fail(what, "an integer in [0, " + std::to_string(max_value) + "]", text);
  }
  return v;
}

double parse_real(std::string_view text, double min_value, double max_value,
                  const std::string& what) {
  double v = 0;
  if (!parse_whole(text, v) || !std::isfinite(v) || v < min_value || v > max_value) {
    fail(what,
         max_value >= std::numeric_limits<double>::max()
             ? "a number >= " + real_text(min_value)
             : "a number in [" + real_text(min_value) + ", " + real_text(max_value) + "]",
         text);
  }
  return v;
}

}  // namespace tpf
