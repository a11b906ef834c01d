#include "parallel/timeline.h"

namespace tpf {

void Timeline::add(const char* category, std::string name, Clock::time_point start,
                   Clock::time_point end) {
  if (!enabled_) return;
  if (spans_.size() >= kMaxSpans) {
    truncated_ = true;
    return;
  }
  using Micro = std::chrono::duration<double, std::micro>;
  spans_.push_back({category, std::move(name), Micro(start.time_since_epoch()).count(),
                    Micro(end - start).count()});
}

}  // namespace tpf
