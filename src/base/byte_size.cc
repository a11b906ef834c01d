#include "base/byte_size.h"

#include <cstdio>

namespace tpf::base {

namespace {

constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
constexpr int kLargestUnit = 4;

}  // namespace

std::string format_bytes(double bytes, int decimals) {
  int unit = 0;
  while (unit < kLargestUnit && (bytes >= 1024.0 || bytes <= -1024.0)) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.*f %s", unit == 0 ? 0 : decimals, bytes, kUnits[unit]);
  return text;
}

std::string format_exact_bytes(size_t bytes) {
  int unit = 0;
  while (unit < kLargestUnit && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

}  // namespace tpf::base
