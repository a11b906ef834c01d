#include "base/process_token.h"

#include <unistd.h>

#include <mutex>
#include <random>

namespace tpf::base {

uint64_t this_process_token() {
  static std::mutex mu;
  static pid_t owner = 0;
  static uint64_t token = 0;
  std::lock_guard lock(mu);
  if (owner != ::getpid()) {
    std::random_device entropy;
    std::mt19937_64 draw((uint64_t{entropy()} << 32) ^ entropy());
    do token = draw();
    while (token == 0);
    owner = ::getpid();
  }
  return token;
}

}  // namespace tpf::base
