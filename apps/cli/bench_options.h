// Command line of `tpf bench` (nccl-tests flags). Parsed before any rank talks to another, so a
// bad flag fails the same way on every rank and never leaves peers waiting.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cli/bench_spec.h"
#include "cli/commands.h"  // UsageError
#include "tpf/dtype.h"

namespace tpf::cli {

struct BenchOptions {
  Collective collective = Collective::all_reduce;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{32} << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool check = true;
  // Which placements each size measures: both (out of place, then in place, as nccl-tests), or
  // one, so that a comparison with a peer that has only one form (MPI_Bcast, a network whose
  // token bucket the other placement's bytes would drain) sees the same traffic as the peer.
  bool out_of_place = true;
  bool in_place = true;  // kept false by bench_options() where the collective has no such form
  // Calls the *_async form and waits for it; send_recv posts its receive and send and then waits
  // for both (how a pipeline stage exchanges activations).
  bool async_calls = false;
  AsyncWait async_wait = AsyncWait::wait;  // with async_calls: how each call is waited for
  // The caller's own work per call, modelled as a sleep (its thread off the CPU, as while a GPU
  // computes): between issuing and waiting with async_calls (overlap), before the call otherwise.
  // The time column leaves it out: it is the time spent inside the library's calls.
  int compute_us = 0;
  std::string json_path;  // empty: no JSON file
};

// The command line as given (unset: not given); bench_options() converts it.
struct BenchFlags {
  std::optional<std::string> collective;
  std::optional<std::string> min_bytes;
  std::optional<std::string> max_bytes;
  std::optional<std::string> factor;
  std::optional<std::string> iters;
  std::optional<std::string> warmup;
  std::optional<std::string> dtype;
  std::optional<std::string> op;
  std::optional<std::string> root;
  std::optional<std::string> check;
  std::optional<std::string> placement;
  std::optional<std::string> async_calls;
  std::optional<std::string> compute_us;
  std::optional<std::string> json;
};

// Adds the collective and the flags (nccl-tests' short and long spellings) to `bench`, bound to
// `flags`, with the help text.
void add_bench_flags(Command& bench, BenchFlags& flags);

// Throws UsageError (main() prints it, exit status 2) naming the flag and the bad value.
BenchOptions bench_options(const BenchFlags& flags);

}  // namespace tpf::cli
