// Gloo baseline for `tpf bench`, on Debian's libgloo-dev (a 2022 snapshot) with the TCP transport
// over loopback and a FileStore rendezvous. Same sweep, f32 sum, same time definition (mean of
// `iters` calls after warm-ups and a barrier, maximised over ranks), one JSON line per size.
//
// Calls: gloo::allreduce (ring algorithm), gloo::allgather, gloo::broadcast (root 0) and, for
// reduce-scatter, gloo::ReduceScatterHalvingDoubling: this Gloo has no options-style
// reduce_scatter function, only that older algorithm class, which works IN PLACE on one buffer.
// Its time is thus an in-place time, the others' out-of-place times.
//
// Processes: `gloo_bench -np N ...` forks the N ranks itself (the rendezvous directory is a fresh
// temporary directory, removed at the end); without -np it reads RANK, WORLD_SIZE and
// GLOO_STORE_DIR (e.g. under torchrun) and runs one rank, listening on GLOO_HOSTNAME (default
// 127.0.0.1).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "peer_common.h"

namespace tpf::peers {
namespace {

constexpr std::chrono::seconds kOpTimeout{300};
constexpr std::chrono::seconds kJobDeadline{3600};

using Ctx = std::shared_ptr<gloo::Context>;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void barrier(const Ctx& ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

// One rank's state for one size. ReduceScatterHalvingDoubling preallocates per (buffer, size),
// so it is built once per size, outside the timed loop, like a user would.
struct SizeRun {
  Collective c;
  CallShape s;
  std::vector<float> send;
  std::vector<float> recv;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs;
};

void run_op(const Ctx& ctx, SizeRun& r) {
  switch (r.c) {
    case Collective::all_reduce: {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setInput(r.send.data(), r.s.count);
      o.setOutput(r.recv.data(), r.s.count);
      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      gloo::allreduce(o);
      break;
    }
    case Collective::all_gather: {
      gloo::AllgatherOptions o(ctx);
      o.setInput(r.send.data(), r.s.count);
      o.setOutput(r.recv.data(), r.s.recv_elems);
      gloo::allgather(o);
      break;
    }
    case Collective::broadcast: {
      gloo::BroadcastOptions o(ctx);
      if (ctx->rank == 0) o.setInput(r.send.data(), r.s.count);
      o.setOutput(r.recv.data(), r.s.count);
      o.setRoot(0);
      gloo::broadcast(o);
      break;
    }
    case Collective::reduce_scatter:
      r.rs->run();  // in place on r.send (see the header comment)
      break;
    default: break;
  }
}

void prepare(const Ctx& ctx, SizeRun& r) {
  for (size_t i = 0; i < r.s.send_elems; ++i) r.send[i] = peer_fill(ctx->rank, i);
  std::fill(r.recv.begin(), r.recv.end(), -1e30f);
}

double reduce_over_ranks(const Ctx& ctx, double v, ReduceFn fn) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(&v, 1);
  o.setReduceFunction(fn);
  gloo::allreduce(o);
  return v;
}

double max_over_ranks(const Ctx& ctx, double v) {
  return reduce_over_ranks(ctx, v, static_cast<ReduceFn>(&gloo::max<double>));
}

int run_rank(const PeerArgs& args, int rank, int n, const std::string& store_dir) {
  gloo::transport::tcp::attr attr;
  // The address this rank listens on: loopback unless GLOO_HOSTNAME names another (a rank in an
  // emulated host listens on its host's link, bench/peers/emulated.py).
  const char* hostname = std::getenv("GLOO_HOSTNAME");
  attr.hostname = hostname != nullptr ? hostname : "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->setTimeout(std::chrono::duration_cast<std::chrono::milliseconds>(kOpTimeout));
  ctx->connectFullMesh(store, dev);
  const Ctx base = ctx;

  for (Collective c : args.collectives) {
    for (size_t bytes : cli::sweep_sizes(args.min_bytes, args.max_bytes, args.factor)) {
      const auto shape = cli::call_shape(c, bytes, sizeof(float), n);
      if (!shape) continue;
      SizeRun r{c, *shape, std::vector<float>(shape->send_elems),
                std::vector<float>(std::max(shape->recv_elems, shape->count)), nullptr};
      if (c == Collective::reduce_scatter) {
        std::vector<int> recv_elems(static_cast<size_t>(n), static_cast<int>(shape->count));
        r.rs = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
            base, std::vector<float*>{r.send.data()}, static_cast<int>(shape->send_elems),
            recv_elems);
      }
      prepare(base, r);
      for (int i = 0; i < args.warmup; ++i) run_op(base, r);
      barrier(base);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < args.iters; ++i) run_op(base, r);
      const auto t1 = std::chrono::steady_clock::now();
      const double time_us = max_over_ranks(
          base, std::chrono::duration<double, std::micro>(t1 - t0).count() / args.iters);

      prepare(base, r);
      run_op(base, r);
      // The halving-doubling reduce-scatter's last (distribution) phase copies rank r's block to
      // the start of the buffer (gloo/reduce_scatter.h, run()). Reading it at r * count instead
      // happened to work on 2 ranks only (the block also stays there) and counted every element
      // of most blocks wrong on 3 and 4 ranks, which earlier notes took for Gloo's error.
      const float* out = c == Collective::reduce_scatter ? r.send.data() : r.recv.data();
      const size_t out_elems = c == Collective::all_gather ? shape->recv_elems : shape->count;
      const double wrong =
          static_cast<double>(peer_count_wrong(c, rank, n, shape->count, out, out_elems));
      const double total =
          reduce_over_ranks(base, wrong, static_cast<ReduceFn>(&gloo::sum<double>));
      if (rank == 0) {
        std::printf(
            "%s\n",
            peer_json_line("gloo", c, n, *shape, time_us, static_cast<size_t>(total)).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

// Removes the rendezvous directory however the run ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gloo_bench.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("gloo_bench: mkdtemp");
      std::exit(1);
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Forks the ranks and reaps them within a deadline; a failed rank takes the others down so that
// nobody waits forever on a peer that is gone.
int fork_ranks(const PeerArgs& args) {
  TempDir dir;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < args.nprocs; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_bench: fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      int rc = 1;
      try {
        rc = run_rank(args, rank, args.nprocs, dir.path());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_bench: rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      _exit(rc);  // the parent owns (and removes) the directory
    }
    pids.push_back(pid);
  }
  int failures = 0;
  size_t alive = pids.size();
  const auto deadline = std::chrono::steady_clock::now() + kJobDeadline;
  while (alive > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --alive;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failures;
        for (pid_t p : pids) kill(p, SIGTERM);  // peers of a dead rank would wait until timeout
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "gloo_bench: ranks still running after %lld s; killing them\n",
                   static_cast<long long>(kJobDeadline.count()));
      for (pid_t p : pids) kill(p, SIGKILL);
      ++failures;
      while (waitpid(-1, &status, 0) > 0) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child, not syncing
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tpf::peers

int main(int argc, char** argv) {
  const tpf::peers::PeerArgs args = tpf::peers::parse_peer_args(argc, argv, "gloo_bench");
  if (args.nprocs > 0) return tpf::peers::fork_ranks(args);
  const char* rank = std::getenv("RANK");
  const char* size = std::getenv("WORLD_SIZE");
  const char* dir = std::getenv("GLOO_STORE_DIR");
  if (rank == nullptr || size == nullptr || dir == nullptr) {
    std::fprintf(stderr,
                 "gloo_bench: pass -np N to fork N ranks, or set RANK, WORLD_SIZE and "
                 "GLOO_STORE_DIR (a directory all ranks share)\n");
    return 2;
  }
  try {
    return tpf::peers::run_rank(args, std::atoi(rank), std::atoi(size), dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: rank %s: %s\n", rank, e.what());
    return 1;
  }
}
