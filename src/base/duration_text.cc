#include "base/duration_text.h"

#include <cstdio>

namespace tpf::base {

std::string format_seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

}  // namespace tpf::base
