// Completion state shared between a Work handle and the communicator that runs its operation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "tpf/comm.h"

namespace tpf::detail {

// What a caller of Work asks of the engine running its operation (WorkState::drive).
struct DriveRequest {
  // Work::test: one round of progress, where no other thread is moving the operation.
  bool one_round = false;
  // Work::wait (no limit) and Work::wait_until: move the operation until it is done or this
  // time has come (an engine that cannot stop an operation midway hands it to its thread).
  Clock::time_point until = Clock::time_point::max();

  // Whether the engine must watch the time (Work::wait_until), not only the operation.
  bool timed() const noexcept { return until != Clock::time_point::max(); }
};

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  Clock::time_point deadline;   // the operation's deadline, counted from when it was issued
  Clock::time_point issued_at;  // when OperationQueue queued it: did its waiter come right behind?
  uint64_t queue_index = 0;     // OperationQueue's: how many operations were issued before it
  // Where the calling thread can move the operation itself: Work's calls run it first (see
  // DriveRequest); it returns once the operation is done, cannot be moved any more, or the
  // request's time has come. Set through drive_hook().
  std::function<void(const DriveRequest&)> drive;

  void complete(std::exception_ptr failure) {
    {
      std::lock_guard lock(mu);
      done = true;
      error = std::move(failure);
    }
    cv.notify_all();
  }
};

// The WorkState::drive of an operation run by `engine`, which serves it with
// `engine.drive(state, request)`. The state outlives its waits (Work holds it) and the engine may
// not, hence the weak pointer: a wait after the engine is gone only reads the state.
template <class Engine>
std::function<void(const DriveRequest&)> drive_hook(std::weak_ptr<Engine> engine,
                                                    WorkState& state) {
  return [engine = std::move(engine), raw = &state](const DriveRequest& request) {
    if (const std::shared_ptr<Engine> self = engine.lock()) self->drive(*raw, request);
  };
}

}  // namespace tpf::detail
