#include "cli/model_cli.h"

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <thread>

#include "tensor/blas.h"
#include "tpf/launch_env.h"

namespace tpf::cli {

namespace {

Communicator make_world(std::unique_ptr<TcpStoreServer>& server) {
  if (launch_env_present()) return Communicator::from_env();
  server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "");
  return Communicator::create(0, 1, "127.0.0.1:" + std::to_string(server->port()));
}

}  // namespace

World::World() : comm_(make_world(server_)) {
  // A training step allocates and frees activations of many MB. By default glibc serves those
  // with mmap and returns them with munmap, so every step page-faults them in again (measured:
  // 20 % of a gpt-6x768 step). Keep blocks up to glibc's 32 MiB maximum in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (launch_env_present()) local_ranks_ = std::max(1, detect_launch_env().local_world_size);
}

int configure_blas_threads(int threads, int local_ranks) {
  if (threads <= 0) {
    // The machine's share of this rank, capped by the CPUs it may run on (`tpf run` pins each
    // rank to its share of the cores; more threads than CPUs would only take turns).
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, local_ranks));
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      threads = std::min(threads, std::max(1, CPU_COUNT(&allowed)));
    }
  }
  set_blas_threads(threads);
  return threads;
}

}  // namespace tpf::cli
