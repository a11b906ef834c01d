// Max-min fair sharing of link bandwidth among flows (progressive filling), once for a set of
// concurrent flows, or as a flow-level simulation that re-shares whenever a flow finishes.
#pragma once

#include <cstddef>
#include <vector>

namespace tpf::plan {

// A flow on a fixed path: the links it crosses (each at most once) and its size.
struct PathFlow {
  std::vector<int> links;
  double bytes = 0;
  double start_us = 0;  // when it starts using bandwidth (after its path latency, say)
};

// Rates in GB/s of each flow when all share `capacity_gbps` max-min fairly: no flow can go faster
// without slowing one that is no faster. Flows crossing no link get `unbounded_gbps`.
std::vector<double> max_min_rates(const std::vector<double>& capacity_gbps,
                                  const std::vector<PathFlow>& flows, double unbounded_gbps = 1e12);

// Finish time of each flow (microseconds) when rates are re-shared max-min at every start and
// finish: the fluid model SimGrid's CM02 network model implements.
std::vector<double> simulate_completion_us(const std::vector<double>& capacity_gbps,
                                           const std::vector<PathFlow>& flows);

}  // namespace tpf::plan
