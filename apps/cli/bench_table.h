// How `tpf bench` reports: the nccl-tests style table on stdout and the JSON file (--json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench_spec.h"
#include "coll/network_cost.h"

namespace tpf::cli {

struct Measurement {
  double time_us = 0.0;           // max over ranks of the mean time of one iteration
  double algbw = 0.0;             // GB/s (1e9 bytes per second)
  double busbw = 0.0;             // GB/s
  std::optional<uint64_t> wrong;  // nullopt when results were not checked (-c 0)
};

struct BenchRow {
  size_t bytes = 0;
  size_t count = 0;  // elements, nccl-tests' count column
  // nullopt where --placement left the form out; ip also where the collective has no such form.
  std::optional<Measurement> oop;
  std::optional<Measurement> ip;
};

struct BenchReport {
  Collective collective = Collective::all_reduce;
  int nranks = 1;
  std::string dtype;  // "f32", ...
  std::string op;     // "sum", ... or "none"
  int root = -1;      // -1 where the collective has no root
  int iters = 0;
  int warmup = 0;
  bool async_calls = false;  // the *_async forms, waited for at once
  AsyncWait async_wait = AsyncWait::wait;  // ... and how
  int compute_us = 0;        // the caller's own work per call (BenchOptions::compute_us)
  // How the fabric was set up (rank 0's communicator settings), so that `tpf plan calibrate` can
  // read a result without help: the all-reduce algorithm inside a host ("one_shot", "two_shot"
  // where TPF_ALLREDUCE_ALGO forced one, else "automatic"), the staging slot, the cores, the ranks
  // beyond them, and the load average when the run started (-1 where unknown).
  std::string algorithm = "automatic";
  // Across hosts: how many, and the network algorithm of all_reduce and broadcast ("one_shot",
  // "pipelined" where TPF_NET_ALGO forced one, else "automatic"; coll/network_cost.h).
  int hosts = 1;
  std::string network_algorithm = "automatic";
  // Across hosts: the smallest slice of a pipelined all_reduce, from the settings
  // (coll::all_reduce_min_slice_bytes), so that tpf plan calibrate-network models what ran.
  size_t network_min_slice_bytes = 0;
  // Across hosts: what the broadcast chain cut its buffer by (coll::chain_cut of the settings).
  coll::ChainCut network_chain;
  size_t slot_bytes = 0;
  int cpus = 0;
  int excess_ranks = 0;
  double loadavg = -1;
  // Creating the communicator (Communicator::from_env), in ms, on the slowest rank: what setup
  // costs at this size and layout (-1 where not measured).
  double setup_ms = -1;
  std::vector<BenchRow> rows;
};

// algbw and busbw in GB/s from bytes and microseconds (0 when the time is 0).
Measurement make_measurement(Collective c, int nranks, size_t bytes, double time_us,
                             std::optional<uint64_t> wrong);

void print_table_header(std::FILE* out, const BenchReport& report);
void print_table_row(std::FILE* out, const BenchReport& report, const BenchRow& row);
// "# Out of bounds values" and "# Avg bus bandwidth" lines.
void print_table_footer(std::FILE* out, const BenchReport& report);

// Mean busbw over all rows and both placements (the nccl-tests "Avg bus bandwidth").
double average_busbw(const BenchReport& report);
uint64_t total_wrong(const BenchReport& report);

std::string report_to_json(const BenchReport& report);

}  // namespace tpf::cli
