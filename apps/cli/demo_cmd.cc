// `tpf demo`: the quick-start's end-to-end job. Every rank runs a few collectives on inputs whose
// results have a closed form, checks every element it received, and rank 0 prints one line per
// collective (verified, time, bus bandwidth) and one line per rank, collected with a gather. The
// exit status is non-zero if any rank saw any wrong value, so the demo doubles as a smoke test.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "cli/bench_spec.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "tpf/comm.h"
#include "tpf/half.h"

namespace tpf::cli {
namespace {

constexpr size_t kElems = size_t{1} << 20;  // 1 Mi elements per collective (4 MiB of f32)
constexpr int kWarmup = 2;
constexpr int kTimedIters = 10;

struct DemoCase {
  const char* label;  // what the table shows
  Collective collective;
  const char* dtype;
  size_t bytes;  // nccl-tests convention, the basis of busbw
  // Runs the collective once on the rank's buffers.
  std::function<void()> run;
  // Number of elements of this rank's output that differ from the closed form.
  std::function<uint64_t()> count_wrong;
};

struct DemoResult {
  double time_us = 0.0;
  double busbw = 0.0;
  uint64_t wrong = 0;  // over all ranks
};

double max_over_ranks(Communicator& comm, double v) {
  double out = 0.0;
  comm.all_reduce(&v, &out, 1, DType::f64, ReduceOp::max);
  return out;
}

DemoResult run_case(Communicator& comm, const DemoCase& c, uint64_t& my_wrong) {
  for (int i = 0; i < kWarmup; ++i) c.run();
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kTimedIters; ++i) c.run();
  const auto t1 = std::chrono::steady_clock::now();
  DemoResult r;
  r.time_us = max_over_ranks(
      comm, std::chrono::duration<double, std::micro>(t1 - t0).count() / kTimedIters);
  // Every case is out of place, so the output after the timed calls is one call's result.
  const uint64_t wrong = c.count_wrong();
  my_wrong += wrong;
  int64_t in = static_cast<int64_t>(wrong);
  int64_t total = 0;
  comm.all_reduce(&in, &total, 1, DType::i64, ReduceOp::sum);
  r.wrong = static_cast<uint64_t>(total);
  if (r.time_us > 0.0) {
    r.busbw = static_cast<double>(c.bytes) / r.time_us / 1e3 *
              coll::bus_bandwidth_factor(c.collective, comm.size());
  }
  return r;
}

int run_demo() {
  Communicator comm = Communicator::from_env();
  const int n = comm.size();
  const int rank = comm.rank();
  const size_t un = static_cast<size_t>(n);

  // all_reduce sum f32: rank r holds (r + 1) + (i % 7), so the sum is n(n+1)/2 + n (i % 7).
  std::vector<float> ar_in(kElems), ar_out(kElems);
  for (size_t i = 0; i < kElems; ++i)
    ar_in[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);
  // all_gather f32: rank r contributes r * 1000 + (i % 100); block r of the output is that.
  const size_t ag_count = kElems / un;
  std::vector<float> ag_in(ag_count), ag_out(ag_count * un);
  for (size_t i = 0; i < ag_count; ++i)
    ag_in[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 100));
  // reduce_scatter sum f32: element j of rank r's input is (r + 1) * (j % 13 + 1); rank r keeps
  // block r of the sum, n(n+1)/2 * (j % 13 + 1) with j = r * count + i.
  const size_t rs_count = kElems / un;
  std::vector<float> rs_in(rs_count * un), rs_out(rs_count);
  for (size_t j = 0; j < rs_in.size(); ++j)
    rs_in[j] = static_cast<float>((rank + 1) * static_cast<int>(j % 13 + 1));
  // broadcast f32 from rank 0: 0.5 * (i % 1000) (exact in binary); other ranks send garbage.
  std::vector<float> bc_in(kElems), bc_out(kElems);
  for (size_t i = 0; i < kElems; ++i)
    bc_in[i] = rank == 0 ? 0.5f * static_cast<float>(i % 1000) : -1.0f;
  // all_reduce sum bf16: rank r holds (i % 4) + (r % 2); the sum n (i % 4) + floor(n / 2),
  // accumulated in f32 and rounded once to bf16 (exact while it stays below 256).
  std::vector<uint16_t> bf_in(kElems), bf_out(kElems);
  for (size_t i = 0; i < kElems; ++i)
    bf_in[i] = f32_to_bf16(static_cast<float>(i % 4 + static_cast<size_t>(rank % 2)));

  const float tri = static_cast<float>(n * (n + 1) / 2);
  const std::vector<DemoCase> cases = {
      {"all_reduce sum", Collective::all_reduce, "f32", kElems * sizeof(float),
       [&] { comm.all_reduce(ar_in.data(), ar_out.data(), kElems, DType::f32, ReduceOp::sum); },
       [&] {
         uint64_t w = 0;
         for (size_t i = 0; i < kElems; ++i)
           w += ar_out[i] != tri + static_cast<float>(n * static_cast<int>(i % 7));
         return w;
       }},
      {"all_gather", Collective::all_gather, "f32", ag_out.size() * sizeof(float),
       [&] { comm.all_gather(ag_in.data(), ag_out.data(), ag_count, DType::f32); },
       [&] {
         uint64_t w = 0;
         for (size_t k = 0; k < ag_out.size(); ++k) {
           w += ag_out[k] != static_cast<float>(static_cast<int>(k / ag_count) * 1000 +
                                                static_cast<int>(k % ag_count % 100));
         }
         return w;
       }},
      {"reduce_scatter sum", Collective::reduce_scatter, "f32", rs_in.size() * sizeof(float),
       [&] {
         comm.reduce_scatter(rs_in.data(), rs_out.data(), rs_count, DType::f32, ReduceOp::sum);
       },
       [&] {
         uint64_t w = 0;
         for (size_t i = 0; i < rs_count; ++i) {
           const size_t j = static_cast<size_t>(rank) * rs_count + i;
           w += rs_out[i] != tri * static_cast<float>(j % 13 + 1);
         }
         return w;
       }},
      {"broadcast root 0", Collective::broadcast, "f32", kElems * sizeof(float),
       [&] { comm.broadcast(bc_in.data(), bc_out.data(), kElems, DType::f32, 0); },
       [&] {
         uint64_t w = 0;
         for (size_t i = 0; i < kElems; ++i) w += bc_out[i] != 0.5f * static_cast<float>(i % 1000);
         return w;
       }},
      {"all_reduce sum", Collective::all_reduce, "bf16", kElems * sizeof(uint16_t),
       [&] { comm.all_reduce(bf_in.data(), bf_out.data(), kElems, DType::bf16, ReduceOp::sum); },
       [&] {
         uint64_t w = 0;
         for (size_t i = 0; i < kElems; ++i) {
           const float exact = static_cast<float>(un * (i % 4) + un / 2);
           w += bf_out[i] != f32_to_bf16(exact);
         }
         return w;
       }},
  };

  std::vector<DemoResult> results;
  std::vector<int64_t> my_wrong(cases.size(), 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    uint64_t w = 0;
    results.push_back(run_case(comm, cases[k], w));
    my_wrong[k] = static_cast<int64_t>(w);
  }
  // Rank 0 learns which rank saw what, so its report can name the culprit.
  // (Every rank passes a real buffer: it is tiny, and no implementation has to special-case null.)
  std::vector<int64_t> all_wrong(cases.size() * un, 0);
  comm.gather(my_wrong.data(), all_wrong.data(), cases.size(), DType::i64, 0);

  uint64_t total = 0;
  for (const auto& r : results) total += r.wrong;
  if (rank == 0) {
    const int hosts = comm.host_count();
    std::printf(
        "tpf demo: %d ranks on %d host%s, %zu elements per collective, %d timed "
        "iterations each\n\n",
        n, hosts, hosts == 1 ? "" : "s", kElems, kTimedIters);
    std::printf("  %-20s %-5s %10s  %-12s %10s %10s\n", "collective", "type", "bytes", "result",
                "time (us)", "busbw GB/s");
    for (size_t k = 0; k < cases.size(); ++k) {
      const auto& c = cases[k];
      const auto& r = results[k];
      std::printf("  %-20s %-5s %10s  %-12s %10.1f %10.2f\n", c.label, c.dtype,
                  base::format_bytes(static_cast<double>(c.bytes)).c_str(),
                  r.wrong == 0 ? "verified OK" : "FAILED", r.time_us, r.busbw);
    }
    std::printf("\n");
    for (int r = 0; r < n; ++r) {
      int64_t wrong = 0;
      std::string which;
      for (size_t k = 0; k < cases.size(); ++k) {
        const int64_t w = all_wrong[static_cast<size_t>(r) * cases.size() + k];
        if (w != 0)
          which += std::string(which.empty() ? "" : ", ") + cases[k].label + " " + cases[k].dtype;
        wrong += w;
      }
      if (wrong == 0) {
        std::printf("  rank %d: all results verified\n", r);
      } else {
        std::printf("  rank %d: %lld wrong values (%s)\n", r, static_cast<long long>(wrong),
                    which.c_str());
      }
    }
    std::printf("\ntpf demo: %s\n", total == 0 ? "all results verified on every rank"
                                               : "FAILED: some results were wrong");
    std::fflush(stdout);
  }
  comm.barrier();  // keep everyone's memory mapped until rank 0 has finished reading
  return total == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void add_demo_command(Command& tpf) {
  Command demo = tpf.add_subcommand("demo", "run a small end-to-end example");
  demo.footer(
      "Runs all_reduce, all_gather, reduce_scatter, broadcast and a bf16 all_reduce on every\n"
      "rank, checks each result against its closed form and prints a short report.\n"
      "Start it on several ranks: tpf run -n 4 -- tpf demo");
  set_action(demo, run_demo);
}

}  // namespace tpf::cli
