// Open MPI baseline for `tpf bench`: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Bcast, and MPI_Reduce, MPI_Gather, MPI_Scatter (root 0) and MPI_Alltoall on f32, out of place
// (MPI_Bcast has only one buffer), over the same size sweep and with the same time definition:
// after warm-ups and a barrier, the mean time of `iters` back-to-back calls, maximised over ranks.
// One JSON line per size on rank 0's stdout (peer_common.h).
//
//   mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --bind-to none -np 4
//       build/bench/mpi_bench -c all_reduce -b 8 -e 32M
// Only the C API is used; skipping Open MPI's deprecated C++ bindings also keeps their warnings
// out.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "peer_common.h"

namespace tpf::peers {
namespace {

void run_op(Collective c, const float* send, float* recv, const CallShape& s) {
  const int count = static_cast<int>(s.count);
  switch (c) {
    case Collective::all_reduce:
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Collective::all_gather:
      MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case Collective::reduce_scatter:
      MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Collective::broadcast: MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case Collective::reduce:
      MPI_Reduce(send, recv, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      break;
    case Collective::gather:
      MPI_Gather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case Collective::scatter:
      MPI_Scatter(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case Collective::all_to_all:
      MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    default: break;
  }
}

// Inputs in the send buffer (the receive buffer for MPI_Bcast, root's copy), poison elsewhere.
void prepare(Collective c, int rank, const CallShape& s, std::vector<float>& send,
             std::vector<float>& recv) {
  for (size_t i = 0; i < s.send_elems; ++i) send[i] = peer_fill(rank, i);
  std::fill(recv.begin(), recv.end(), -1e30f);
  if (c == Collective::broadcast && rank == 0) {
    for (size_t i = 0; i < s.count; ++i) recv[i] = peer_fill(0, i);
  }
}

int run(const PeerArgs& args) {
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (Collective c : args.collectives) {
    for (size_t bytes : cli::sweep_sizes(args.min_bytes, args.max_bytes, args.factor)) {
      const auto shape = cli::call_shape(c, bytes, sizeof(float), n);
      if (!shape) continue;
      std::vector<float> send(shape->send_elems);
      std::vector<float> recv(std::max(shape->recv_elems, shape->count));
      prepare(c, rank, *shape, send, recv);
      for (int i = 0; i < args.warmup; ++i) run_op(c, send.data(), recv.data(), *shape);
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < args.iters; ++i) run_op(c, send.data(), recv.data(), *shape);
      const auto t1 = std::chrono::steady_clock::now();
      double mine = std::chrono::duration<double, std::micro>(t1 - t0).count() / args.iters;
      double time_us = 0.0;
      MPI_Allreduce(&mine, &time_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

      // One checked call, so a fast number is also a right one.
      prepare(c, rank, *shape, send, recv);
      run_op(c, send.data(), recv.data(), *shape);
      // What this rank's output holds (of the rooted collectives only root 0's gather and
      // reduce have one).
      size_t out_elems = shape->count;
      if (c == Collective::all_gather || c == Collective::all_to_all) out_elems = shape->recv_elems;
      if (c == Collective::gather) out_elems = rank == 0 ? shape->recv_elems : 0;
      if (c == Collective::reduce && rank != 0) out_elems = 0;
      unsigned long long wrong = peer_count_wrong(c, rank, n, shape->count, recv.data(), out_elems);
      unsigned long long total = 0;
      MPI_Reduce(&wrong, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        std::printf("%s\n", peer_json_line("mpi", c, n, *shape, time_us, total).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tpf::peers

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const tpf::peers::PeerArgs args =
      tpf::peers::parse_peer_args(argc, argv, "mpi_bench", tpf::peers::mpi_supports);
  const int rc = tpf::peers::run(args);
  MPI_Finalize();
  return rc;
}
