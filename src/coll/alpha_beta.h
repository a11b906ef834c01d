// The alpha-beta cost model of collective algorithms over one class of links. One source of
// truth: the shared-memory runtime picks its all-reduce algorithm with it (coll/cost_model.h
// builds the shared-memory link class), and the planner (src/plan) predicts NVLink, InfiniBand
// and whole-cluster collectives with the same formulas and other link classes.
//
// Each algorithm is reduced to what one rank does: synchronized steps (alpha each), bytes it
// copies through a staging buffer, bytes that cross its port from peers, and bytes its reduction
// reads. Time = steps * alpha + staged / stage_gbps + wire / port_gbps + reduced / reduce_gbps.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "coll/collective_kinds.h"

namespace tpf::coll {

// A class of links between the ranks of a collective (shared memory, NVLink, a NIC on a network).
// Rates in GB/s (1e9 bytes per second); 0 means "not a bottleneck" (infinitely fast).
struct LinkClass {
  std::string name;
  double alpha_us = 0;     // latency of one synchronized step between peers
  double port_gbps = 0;    // achievable bytes per second into one rank (per direction)
  double stage_gbps = 0;   // copies into / out of staging buffers; 0 = peers read user buffers
  double reduce_gbps = 0;  // bytes per second a rank's reduction reads
};

enum class Algorithm { one_shot, two_shot, ring, tree };

const char* to_string(Algorithm algorithm);
// The collectives this model prices: all_reduce, all_gather, reduce_scatter, broadcast,
// all_to_all, send_recv.
bool has_cost_model(Collective op) noexcept;
// A priced collective by any spelling parse_collective() accepts; throws Error(invalid_argument)
// naming the accepted ones.
Collective parse_collective_op(const std::string& name);
Algorithm parse_algorithm(const std::string& name);

// What one rank does in an algorithm (see the header comment).
struct StepTraffic {
  double steps = 0;
  double staged_bytes = 0;
  double wire_bytes = 0;
  double reduced_bytes = 0;
};

// `bytes` is the per-rank buffer nccl-tests calls the message size: the all-reduce buffer, the
// all-gather output, the reduce-scatter input, the broadcast buffer, the all-to-all send buffer.
// `pipeline_chunks` is how many pieces a pipelined algorithm (two-shot) moves the buffer in.
StepTraffic traffic_of(Collective op, Algorithm algorithm, double bytes, int nranks, bool staged,
                       double pipeline_chunks = 1);

// Microseconds for `traffic` over `link`: steps * alpha plus each byte count at its rate.
double traffic_us(const StepTraffic& traffic, const LinkClass& link);

// Microseconds for `op` with `algorithm` on `nranks` ranks joined by `link`; nullopt where the
// algorithm does not implement the op (e.g. tree all-gather).
std::optional<double> predict_us(Collective op, Algorithm algorithm, double bytes, int nranks,
                                 const LinkClass& link, double pipeline_chunks = 1);

// The algorithms a tuner chooses from for `op`, cheapest first, with their predicted times.
struct AlgorithmTime {
  Algorithm algorithm;
  double us;
};
// `allowed` empty = every algorithm; otherwise only those listed (e.g. ring and tree where peers'
// memory is not mapped, as across a network).
std::vector<AlgorithmTime> rank_algorithms(Collective op, double bytes, int nranks,
                                           const LinkClass& link,
                                           const std::vector<Algorithm>& allowed = {});

// One level of a hierarchical all-reduce: `ranks` peers joined by `link`, using the cheapest of
// `allowed` (empty = any).
struct HierarchyLevel {
  int ranks = 1;
  LinkClass link;
  std::vector<Algorithm> allowed;
};

// A hierarchical all-reduce (NCCL across nodes; scale-up, then rail, then spine): reduce-scatter
// at each level from the innermost out, each on the share the level below left, all-reduce the
// last share at the outermost level, then all-gather back in. `outer_algorithm`, if given,
// receives the algorithm of the outermost all-reduce.
double predict_hierarchical_all_reduce_us(double bytes, const std::vector<HierarchyLevel>& levels,
                                          Algorithm* outer_algorithm = nullptr);

}  // namespace tpf::coll
