// What the model subcommands (train, generate) share: the world communicator (from `tpf run`'s
// environment, or a one-rank group when started alone), and the BLAS thread count per rank.
#pragma once

#include <memory>

#include "tpf/comm.h"
#include "tpf/store.h"

namespace tpf::cli {

// The ranks of this job: from the launcher's environment if there is one, else a group of one
// (a store served in-process), so `tpf train ...` runs without `tpf run`.
class World {
 public:
  World();
  Communicator& comm() { return comm_; }
  // Ranks of this job on this machine (they share its cores).
  int local_ranks() const { return local_ranks_; }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  int local_ranks_ = 1;
  Communicator comm_;
};

// The largest --threads.
inline constexpr int kMaxBlasThreads = 4096;

// OpenBLAS threads per rank: `threads` (--threads) if positive, else this machine's cores divided
// among the ranks that share it (the launcher's local world size), capped by the CPUs the rank is
// allowed to run on, at least 1.
int configure_blas_threads(int threads, int local_ranks);

}  // namespace tpf::cli
