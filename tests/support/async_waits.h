// Waiting for asynchronous transfers from another thread of a rank, for the point-to-point tests
// within a host and across hosts alike.
#pragma once

#include <exception>
#include <thread>

#include "tpf/comm.h"

namespace tpf::testing {

// Waits for `work` on a thread of its own; join() rethrows what that wait threw.
class WaitOnAnotherThread {
 public:
  explicit WaitOnAnotherThread(Work work)
      : thread_([this, work]() mutable {
          try {
            work.wait();
          } catch (...) {
            failure_ = std::current_exception();
          }
        }) {}
  ~WaitOnAnotherThread() {
    if (thread_.joinable()) thread_.join();
  }
  WaitOnAnotherThread(const WaitOnAnotherThread&) = delete;
  WaitOnAnotherThread& operator=(const WaitOnAnotherThread&) = delete;

  void join() {
    thread_.join();
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  std::exception_ptr failure_;  // declared before thread_: set by it
  std::thread thread_;
};

// Every rank calls it. Rank 0 posts a receive from `peer` that never comes, waits for it on
// another thread and destroys the communicator meanwhile: the wait must end with Error(aborted)
// and leave the buffer alone, whether it was moving the transfer itself at that moment or not
// yet. The other ranks keep their communicator until rank 0 is done (had the peer left first,
// the wait would name it instead).
void expect_destroy_ends_a_pending_wait(Communicator& comm, int peer);

// Every rank calls it. Rank 0 posts a receive from `peer` (of many chunks), which `peer` sends only
// after a barrier that rank 0 enters after a wait_for of 1 ms: that wait must return false with
// the receive still pending, and a later wait_for, moving the transfer itself, true with every
// element in place.
void expect_timed_waits_end_at_their_time(Communicator& comm, int peer);

}  // namespace tpf::testing
