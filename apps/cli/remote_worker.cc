#include "cli/remote_worker.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <string>

#include "tpf/error.h"

namespace tpf::cli {

RemoteWorker::RemoteWorker() : ready_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!ready_.valid()) throw_system_error(ErrorCode::system, "eventfd", errno);
}

RemoteWorker::~RemoteWorker() {
  finish();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ending_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RemoteWorker::post(Work work, Then if_failed) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_.push_back({std::move(work), std::move(if_failed)});
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
  changed_.notify_all();
}

void RemoteWorker::run_results() {
  std::deque<Then> results;
  {
    // The count is read with the results taken (the worker adds both under the lock), so fd()
    // is readable exactly while results wait.
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t count = 0;
    while (::read(ready_.get(), &count, sizeof count) < 0 && errno == EINTR) {
    }
    results.swap(results_);
  }
  for (Then& then : results) then();
}

void RemoteWorker::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return work_.empty() && !busy_; });
  results_.clear();
  uint64_t count = 0;
  while (::read(ready_.get(), &count, sizeof count) < 0 && errno == EINTR) {
  }
}

void RemoteWorker::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return ending_ || !work_.empty(); });
    if (work_.empty()) return;  // ending, with nothing left to run
    Posted posted = std::move(work_.front());
    work_.pop_front();
    busy_ = true;
    lock.unlock();
    Then then;
    try {
      then = posted.work();
    } catch (const std::exception& e) {
      // The remote commands say what failed themselves; this is a failure around them.
      report(std::string("warning: commands on the job's hosts failed: ") + e.what());
      then = std::move(posted.if_failed);
    }
    lock.lock();
    busy_ = false;
    if (then) {
      results_.push_back(std::move(then));
      const uint64_t one = 1;
      while (::write(ready_.get(), &one, sizeof one) < 0 && errno == EINTR) {
      }
    }
    changed_.notify_all();
  }
}

}  // namespace tpf::cli
