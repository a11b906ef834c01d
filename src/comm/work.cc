#include "comm/work_state.h"
#include "tpf/error.h"

namespace tpf {

void Work::wait() {
  if (!state_) return;
  // An ended operation needs no driving (which would wake the engine for nothing).
  if (state_->drive && !completed()) state_->drive(detail::DriveRequest{});
  // No timeout here: the operation itself is bounded (every wait inside it has the deadline, and
  // the communicator completes every queued task, with an error if it must). Returning earlier
  // would hand the buffers back while the operation may still use them.
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::test() {
  if (!state_) return true;
  if (state_->drive) state_->drive(detail::DriveRequest{.one_round = true});
  std::lock_guard lock(state_->mu);
  if (state_->done && state_->error) std::rethrow_exception(state_->error);
  return state_->done;
}

bool Work::completed() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

bool Work::wait_until(Clock::time_point deadline) {
  if (!state_) return true;
  if (state_->drive && !completed()) state_->drive(detail::DriveRequest{.until = deadline});
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_until(lock, deadline, [&] { return state_->done; })) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

}  // namespace tpf
