// What this rank spent its time on: named spans of wall time in categories ("compute", "tp",
// "pp", "dp"), recorded while a Timeline is enabled, for `tpf train --trace` (Chrome's trace
// format, model/trace_file.h). Times are the steady clock in microseconds, which every process
// of one host shares, so the ranks' spans line up.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tpf {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // A long run stops recording here (about 100 MB of spans) rather than growing without bound.
  static constexpr size_t kMaxSpans = size_t{1} << 20;

  struct Span {
    const char* category;  // a string literal
    std::string name;
    double start_us;
    double duration_us;
  };

  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_; }
  void add(const char* category, std::string name, Clock::time_point start, Clock::time_point end);
  const std::vector<Span>& spans() const { return spans_; }
  bool truncated() const { return truncated_; }

 private:
  bool enabled_ = false;
  bool truncated_ = false;
  std::vector<Span> spans_;
};

// Runs f, adds its wall time to `seconds` and, where `timeline` records, a span (also when f
// throws). Returns what f returns.
template <class F>
decltype(auto) timed_span(Timeline* timeline, double& seconds, const char* category,
                          const char* name, F&& f) {
  struct Record {
    Timeline* timeline;
    double& seconds;
    const char* category;
    const char* name;
    Timeline::Clock::time_point start = Timeline::Clock::now();
    ~Record() {
      const auto end = Timeline::Clock::now();
      seconds += std::chrono::duration<double>(end - start).count();
      if (timeline != nullptr && timeline->enabled()) timeline->add(category, name, start, end);
    }
  } record{timeline, seconds, category, name};
  return std::forward<F>(f)();
}

}  // namespace tpf
