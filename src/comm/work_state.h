// Completion state shared between a Work handle and the communicator that runs its operation.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

#include "tpf/comm.h"

namespace tpf::detail {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  Clock::time_point deadline;  // the operation's deadline, counted from when it was issued
  // Where the calling thread can move the operation itself (a point-to-point transfer): Work::wait
  // runs drive(true) first, which returns once the operation is done or cannot be moved any more;
  // Work::test runs drive(false), one round of progress where no other thread is moving it.
  std::function<void(bool until_done)> drive;

  void complete(std::exception_ptr failure) {
    {
      std::lock_guard lock(mu);
      done = true;
      error = std::move(failure);
    }
    cv.notify_all();
  }
};

}  // namespace tpf::detail
