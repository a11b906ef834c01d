#include "plan/max_min.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "tpf/error.h"

namespace tpf::plan {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Progressive filling over the flows marked active. All active flows rise together; a link
// saturates at level (capacity - frozen load) / active flows on it; the lowest such level freezes
// the flows crossing that link. A heap with lazy entries keeps this O(sum of path lengths * log).
std::vector<double> progressive_filling(const std::vector<double>& capacity,
                                        const std::vector<PathFlow>& flows,
                                        const std::vector<char>& active, double unbounded) {
  const size_t nlinks = capacity.size();
  std::vector<double> rate(flows.size(), 0.0);
  std::vector<double> frozen_load(nlinks, 0.0);
  std::vector<int> active_on_link(nlinks, 0);
  std::vector<char> frozen(flows.size(), 1);
  for (size_t f = 0; f < flows.size(); ++f) {
    if (!active[f]) continue;
    if (flows[f].links.empty()) {
      rate[f] = unbounded;
      continue;
    }
    frozen[f] = 0;
    for (int link : flows[f].links) {
      if (link < 0 || static_cast<size_t>(link) >= nlinks) {
        throw Error(ErrorCode::invalid_argument,
                    "flow " + std::to_string(f) + " crosses unknown link " + std::to_string(link));
      }
      ++active_on_link[link];
    }
  }
  // The flows on each link, as one array indexed by offsets (a million small vectors would cost
  // more than the solve).
  std::vector<size_t> first(nlinks + 1, 0);
  for (size_t link = 0; link < nlinks; ++link) first[link + 1] = first[link] + active_on_link[link];
  std::vector<int> on_link(first[nlinks]);
  {
    std::vector<size_t> next(first.begin(), first.end() - 1);
    for (size_t f = 0; f < flows.size(); ++f) {
      if (frozen[f]) continue;
      for (int link : flows[f].links) on_link[next[link]++] = static_cast<int>(f);
    }
  }
  auto level_of = [&](size_t link) {
    return std::max(0.0, capacity[link] - frozen_load[link]) / active_on_link[link];
  };
  using Entry = std::pair<double, int>;  // (saturation level, link)
  std::vector<Entry> entries;
  for (size_t link = 0; link < nlinks; ++link) {
    if (active_on_link[link] > 0) entries.push_back({level_of(link), static_cast<int>(link)});
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap(std::greater<>{},
                                                                      std::move(entries));
  while (!heap.empty()) {
    auto [level, link] = heap.top();
    heap.pop();
    if (active_on_link[link] == 0) continue;
    const double current = level_of(link);
    if (current > level * (1 + 1e-12) + 1e-300) {  // stale entry: the link's level rose
      heap.push({current, link});
      continue;
    }
    for (size_t i = first[link]; i < first[link + 1]; ++i) {
      const int f = on_link[i];
      if (frozen[f]) continue;
      frozen[f] = 1;
      rate[f] = current;
      for (int other : flows[f].links) {
        frozen_load[other] += current;
        --active_on_link[other];
      }
    }
  }
  return rate;
}

}  // namespace

std::vector<double> max_min_rates(const std::vector<double>& capacity_gbps,
                                  const std::vector<PathFlow>& flows, double unbounded_gbps) {
  return progressive_filling(capacity_gbps, flows, std::vector<char>(flows.size(), 1),
                             unbounded_gbps);
}

std::vector<double> simulate_completion_us(const std::vector<double>& capacity_gbps,
                                           const std::vector<PathFlow>& flows) {
  const size_t n = flows.size();
  std::vector<double> remaining(n), finish(n, kInfinity);
  std::vector<char> active(n, 0);
  for (size_t f = 0; f < n; ++f) {
    if (!(flows[f].bytes >= 0) || !(flows[f].start_us >= 0)) {
      throw Error(ErrorCode::invalid_argument,
                  "flow " + std::to_string(f) + " has a negative size or start time");
    }
    remaining[f] = flows[f].bytes;
  }
  double now = 0;
  size_t done = 0;
  while (done < n) {
    // Start every flow whose time has come; finish empty ones at once.
    double next_start = kInfinity;
    for (size_t f = 0; f < n; ++f) {
      if (finish[f] != kInfinity || active[f]) continue;
      if (flows[f].start_us <= now) {
        if (remaining[f] <= 0) {
          finish[f] = now;
          ++done;
        } else {
          active[f] = 1;
        }
      } else {
        next_start = std::min(next_start, flows[f].start_us);
      }
    }
    if (done == n) break;
    std::vector<double> rate = progressive_filling(capacity_gbps, flows, active, 1e12);
    // Advance to the first finish or start; GB/s = 1e3 bytes per microsecond.
    double step = next_start - now;
    for (size_t f = 0; f < n; ++f) {
      if (active[f] && rate[f] > 0) step = std::min(step, remaining[f] / (rate[f] * 1e3));
    }
    if (step == kInfinity) {
      throw Error(ErrorCode::invalid_argument,
                  "flow simulation stalled: a flow crosses a link of "
                  "zero capacity");
    }
    now += step;
    for (size_t f = 0; f < n; ++f) {
      if (!active[f]) continue;
      remaining[f] -= rate[f] * 1e3 * step;
      // A relative tolerance: flows that finish together must finish in the same event.
      if (remaining[f] <= 1e-9 * std::max(1.0, flows[f].bytes)) {
        active[f] = 0;
        finish[f] = now;
        ++done;
      }
    }
  }
  return finish;
}

}  // namespace tpf::plan
