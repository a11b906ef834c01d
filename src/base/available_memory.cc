#include "base/available_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>

namespace tpf::base {
namespace {

std::optional<size_t> number_in(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return std::nullopt;  // "max" (v2: no limit) fails below
  size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// What this process's memory cgroup has left, if it has a limit.
std::optional<size_t> cgroup_left() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "N:memory:/path" (v1; controllers may share a line: "N:cpu,memory:").
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::optional<size_t> limit, used;
    if (controllers.empty()) {
      limit = number_in("/sys/fs/cgroup" + path + "/memory.max");
      used = number_in("/sys/fs/cgroup" + path + "/memory.current");
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      limit = number_in("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      used = number_in("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
    }
    if (limit && used) return *limit > *used ? *limit - *used : 0;
  }
  return std::nullopt;
}

}  // namespace

std::optional<size_t> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  std::optional<size_t> available;
  while (in >> key >> kib) {
    std::getline(in, unit);  // " kB"
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  if (!available) return std::nullopt;
  if (const auto left = cgroup_left()) return std::min(*available, *left);
  return available;
}

}  // namespace tpf::base
