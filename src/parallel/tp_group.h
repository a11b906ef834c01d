// The tensor-parallel group a layer runs in: the communicator, whether sequence parallelism is on,
// and a clock for the time spent communicating (for the "share of time in communication" that
// `tpf train` reports).
#pragma once

#include <chrono>
#include <utility>

#include "tpf/comm.h"

namespace tpf {

struct TpGroup {
  Communicator* comm = nullptr;
  // Activations between the attention and MLP blocks are sharded along the sequence (rows):
  // LayerNorm and dropout work on 1/T of the rows; all-gather / reduce-scatter replace the
  // all-reduces (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  // Models", 2022).
  bool sequence_parallel = false;
  double comm_seconds = 0;

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }

  // Runs f (a region operator or collective) and adds its wall time to comm_seconds.
  template <class F>
  decltype(auto) timed(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    struct AddElapsed {  // also on the way out of a void f or an exception
      double& total;
      std::chrono::steady_clock::time_point start;
      ~AddElapsed() {
        total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    } add{comm_seconds, start};
    return std::forward<F>(f)();
  }
};

}  // namespace tpf
