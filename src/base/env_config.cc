#include "base/env_config.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "tpf/error.h"

namespace tpf::base {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<size_t> env_bytes(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text->c_str(), &end, 10);
  size_t scale = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'k': case 'K': scale = size_t{1} << 10; break;
      case 'm': case 'M': scale = size_t{1} << 20; break;
      case 'g': case 'G': scale = size_t{1} << 30; break;
      default: end = nullptr;
    }
    if (end != nullptr && end[1] != '\0') end = nullptr;
  }
  if (errno != 0 || end == nullptr || end == text->c_str() || (*text)[0] == '-') {
    throw Error(ErrorCode::invalid_argument,
                std::string(name) + "='" + *text + "' is not a size (examples: 4096, 64K, 8M)");
  }
  if (value > std::numeric_limits<size_t>::max() / scale) {
    throw Error(ErrorCode::invalid_argument,
                std::string(name) + "='" + *text + "' is too large to be a size in bytes");
  }
  return static_cast<size_t>(value) * scale;
}

bool env_request(const char* name, const std::string& meaning) {
  const auto value = env_string(name);
  if (!value || *value == "0") return false;
  if (*value == "1") return true;
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + "='" + *value + "' should be 1 (" + meaning + ") or 0");
}

std::optional<std::chrono::milliseconds> env_seconds(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  double seconds = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > 1e8) {
    throw Error(ErrorCode::invalid_argument,
                std::string(name) + "='" + *text + "' is not a number of seconds in (0, 1e8]");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000.0)));
}

}  // namespace tpf::base
