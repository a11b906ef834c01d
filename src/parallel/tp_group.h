// The tensor-parallel group a layer runs in: the communicator, whether sequence parallelism is on,
// and a clock for the time spent communicating (for the "share of time in communication" that
// `tpf train` reports).
#pragma once

#include <utility>

#include "parallel/timeline.h"
#include "tpf/comm.h"

namespace tpf {

struct TpGroup {
  Communicator* comm = nullptr;
  // Activations between the attention and MLP blocks are sharded along the sequence (rows):
  // LayerNorm and dropout work on 1/T of the rows; all-gather / reduce-scatter replace the
  // all-reduces (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  // Models", 2022).
  bool sequence_parallel = false;
  // A column-parallel layer's backward starts its input gradient's all-reduce (reduce-scatter
  // with sequence parallelism) before computing its weight gradient, and waits after: the same
  // numbers, the communication hidden behind the GEMM where cores are free to progress it.
  bool overlap_backward_comm = false;
  double comm_seconds = 0;

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }

  Timeline* timeline = nullptr;  // records a "tp" span per collective where enabled

  // Runs f (a region operator or collective) and adds its wall time to comm_seconds.
  template <class F>
  decltype(auto) timed(F&& f) {
    return timed_span(timeline, comm_seconds, "tp", "TP collective", std::forward<F>(f));
  }
};

}  // namespace tpf
