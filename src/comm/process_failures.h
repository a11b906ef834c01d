// The first failure of any communicator in this process. Communicators are independent, but a
// process that fails on one of them usually exits, and the peers it shares other communicators
// with then see only that it died. So the first failure is noted in the segment of every
// communicator the process holds: those peers report the root cause, not a death that follows
// from it. (The one process-wide registry of the library: it spans communicators by nature.)
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <vector>

#include "transport/shm_fabric.h"

namespace tpf::detail {

class ProcessFailures {
 public:
  static ProcessFailures& instance();

  // A live communicator's fabric; it gets the note at once if a failure came first.
  void add(transport::ShmFabric* fabric);
  void remove(transport::ShmFabric* fabric);
  // Keeps `root` if it is the process's first failure and notes it in every live fabric.
  void record(const transport::FailureRecord& root);
  // The process's first failure, if it met one.
  std::optional<transport::FailureRecord> first();

 private:
  // A forked child starts with none of this: its parent's failure and communicators are not its
  // own (writing a note into an inherited mapping would reach the parent's peers).
  void forget_if_forked();

  std::mutex mu_;
  pid_t pid_ = 0;  // the process the state belongs to
  std::vector<transport::ShmFabric*> fabrics_;
  std::optional<transport::FailureRecord> first_;
};

}  // namespace tpf::detail
