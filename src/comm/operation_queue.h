// Runs a communicator's collectives one at a time, in issue order. A blocking call runs inline when
// nothing is queued (the owner thread without a locked instruction, through OwnerGate); otherwise
// operations queue, and each is run by whichever thread reaches it first: the thread that waits
// for it (Work::wait runs the queue up to its own operation: no hand-off to another thread and
// back) or the queue's worker thread, which runs what nobody waits for (overlap). The worker is
// not woken for each operation (where the ranks fill the cores, that wake-up cost more than a
// small operation: docs/fabric.md, "Threads"): it takes what has sat in the queue through one of
// its looks (every 1-16 ms, comm/background_progress.h), and it is woken to start an operation at
// once where it ran the last one while no waiter came, or where the last one's waiter came late
// (as when async collectives overlap the caller's work, step after step: kOverlappingWaiter), or
// where a waiter with a time limit hurries it (that waiter runs an operation itself only where
// the operation's own deadline comes first: it could not stop one midway at its time), or a
// caller polling with Work::test does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "coll/op_desc.h"
#include "comm/background_progress.h"
#include "comm/owner_gate.h"
#include "comm/work_state.h"
#include "tpf/comm.h"

namespace tpf::detail {

class OperationQueue : public std::enable_shared_from_this<OperationQueue> {
 public:
  // Runs one collective now, on the thread running the queued operation, under its deadline.
  using RunCollective = std::function<void(const coll::OpDesc&)>;
  struct Task {
    coll::OpDesc desc;  // unused by a composite operation
    const char* name;   // the operation, in errors
    // Set for a composite operation (all_to_allv: its counts, then its data), which runs its
    // collectives through the RunCollective it is given.
    std::function<void(const RunCollective&)> composite = {};
    // Set by enqueue; its queue_index is how many operations were issued before this one.
    std::shared_ptr<WorkState> state = {};
  };
  // Runs a task on whichever thread took it and returns its failure, if any.
  using Runner = std::function<std::exception_ptr(const Task&)>;

  // `comm_name` names the communicator in errors. Without `start_worker` (tests only) nothing
  // runs an operation until a thread waits for it. A waiter that comes `overlapping_waiter` or
  // more after its operation was issued overlaps (tests choose zero, or never).
  OperationQueue(bool asymmetric_fences, Runner runner, std::string comm_name,
                 bool start_worker = true, Clock::duration overlapping_waiter = kOverlappingWaiter);
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  // Who may use the fabric now: the owner thread inline, or a claim holder.
  OwnerGate& gate() noexcept { return gate_; }

  // Queues the task behind everything issued before it (it holds a gate claim until it has run).
  Work enqueue(Task task, Clock::time_point deadline);
  // For a blocking call that holds a gate claim and found the owner out: true if nothing is queued
  // or running, and the caller now runs its operation inline; it must then call end_inline().
  bool begin_inline();
  void end_inline();

  // Whether the worker sleeps until an enqueue wakes it (it found the queue empty for a while).
  bool worker_asleep();
  // Whether the next operation is the worker's to start at once: the last one ran on the worker
  // and its waiter, if any, came after it had started, or its waiter overlapped.
  bool worker_starts_next();

  // Whether the worker is to start the queued front operation at once, without waiting for its
  // next look (it ran the last one, or a waiter or a poller hurried it).
  bool worker_starts_front();

  // Work's hook (drive_hook): runs the queue up to and including `state`'s operation unless
  // another thread took it (Work::wait), as far as each operation's deadline comes before
  // `request.until` (Work::wait_until; the worker is told to start the rest at once). Work::test
  // cannot move a collective one round at a time: it tells the worker to start it (and those
  // queued before it) at once, so a caller that polls does not wait for the worker's next look.
  void drive(const WorkState& state, const DriveRequest& request);

  // Joins the worker, waits for an operation another thread is running (bounded by its deadline)
  // and fails what is still queued with Error(aborted). Nothing runs after it.
  void stop();

 private:
  void worker_loop();
  // Work::wait's: runs the queue up to and including `state`'s operation unless another thread
  // took it; returns once it is done or taken, or the queue stops, or at `until` (or where the
  // next operation's deadline is later) after hurrying the worker.
  void drive_until_done(const WorkState& state, const DriveRequest& request);
  // Work::test's: the worker is to start `state`'s operation at once, if it is still queued.
  void hurry(const WorkState& state);
  // `state`'s task while it is queued (not taken by any thread), else null.
  const Task* find_locked(const WorkState& state) const;
  // The worker is to start everything up to `task` at once.
  void hurry_locked(const Task& task);
  // Whether the worker starts the front operation now, without waiting for its next look.
  bool worker_starts_front_locked() const;
  // Pops the front task and runs it with the lock released; `owner_out` tells whether the owner
  // is known to be out of the fabric since this thread's last task (then no fence is needed).
  // `worker_starts_next` becomes worker_starts_next_ (the worker is woken at its end for a queued
  // front where it holds and this thread is not the worker).
  void run_front(std::unique_lock<std::mutex>& lock, bool& owner_out, bool on_worker,
                 bool worker_starts_next);

  OwnerGate gate_;
  const Runner runner_;
  const std::string comm_name_;
  const bool start_worker_;
  const Clock::duration overlapping_waiter_;
  std::mutex mu_;
  // Two, so that the end of each operation does not wake the worker.
  std::condition_variable worker_cv_;  // an enqueue for the sleeping worker, or stopping
  std::condition_variable turn_cv_;    // `running_` or the queue changed, or stopping
  std::deque<Task> queue_;
  bool running_ = false;  // an operation is executing (inline, on the worker or on a waiter)
  bool stopping_ = false;
  uint64_t issued_ = 0;         // operations enqueued so far
  bool worker_asleep_ = false;  // until an enqueue wakes it (after ~100 ms of an empty queue)
  // Who is expected to start the next operation: the worker (woken at enqueue) where it ran the
  // last one unless that one's waiter, right behind it, found it running, or where the last one's
  // waiter overlapped; otherwise its waiter.
  // Changed under mu_; read without it by a timed waiter, which has nothing to do where it holds.
  std::atomic<bool> worker_starts_next_{false};
  const WorkState* running_on_worker_ = nullptr;  // the operation the worker runs, if any
  uint64_t hurried_through_ = 0;  // operations with a lower index are the worker's to start now
  std::thread worker_;
};

}  // namespace tpf::detail
