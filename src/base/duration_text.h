// Durations as messages spell them: the one place that does, so a loss found after "10.0 s" reads
// alike whichever part of the fabric found it.
#pragma once

#include <chrono>
#include <string>

namespace tpf::base {

// "10.0 s", "0.3 s": seconds with one decimal.
std::string format_seconds(std::chrono::milliseconds duration);

}  // namespace tpf::base
