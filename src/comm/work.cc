#include "comm/work_state.h"
#include "tpf/error.h"

namespace tpf {
namespace {

// An operation fails by its own deadline; this margin only guards against a bug leaving a Work
// incomplete forever.
constexpr std::chrono::seconds kCompletionMargin{30};

}  // namespace

void Work::wait() {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_until(lock, state_->deadline + kCompletionMargin,
                             [&] { return state_->done; })) {
    throw Error(ErrorCode::internal, "operation did not complete within its deadline");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::test() {
  if (!state_) return true;
  std::lock_guard lock(state_->mu);
  if (state_->done && state_->error) std::rethrow_exception(state_->error);
  return state_->done;
}

bool Work::wait_until(Clock::time_point deadline) {
  if (!state_) return true;
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_until(lock, deadline, [&] { return state_->done; })) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

}  // namespace tpf
