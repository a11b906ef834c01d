#include "comm/operation_queue.h"

#include <algorithm>
#include <utility>

#include "comm/background_progress.h"
#include "tpf/error.h"

namespace tpf::detail {

OperationQueue::OperationQueue(bool asymmetric_fences, Runner runner, std::string comm_name,
                               bool start_worker, Clock::duration overlapping_waiter)
    : gate_(asymmetric_fences),
      runner_(std::move(runner)),
      comm_name_(std::move(comm_name)),
      start_worker_(start_worker),
      overlapping_waiter_(overlapping_waiter) {}

OperationQueue::~OperationQueue() { stop(); }

Work OperationQueue::enqueue(Task task, Clock::time_point deadline) {
  task.state = std::make_shared<WorkState>();
  task.state->deadline = deadline;
  task.state->issued_at = Clock::now();
  task.state->drive = drive_hook(weak_from_this(), *task.state);
  Work work(task.state);
  gate_.add_claim();  // held until the task has run: the owner stays out of the fabric meanwhile
  std::unique_lock lock(mu_);
  if (stopping_) {
    lock.unlock();
    gate_.release_claim();
    task.state->complete(std::make_exception_ptr(
        Error(ErrorCode::aborted, std::string(task.name) + " on communicator '" + comm_name_ +
                                      "': the communicator is being destroyed")));
    return work;
  }
  task.state->queue_index = issued_++;
  queue_.push_back(std::move(task));
  // Woken for it only where it sleeps or ran the last operation (no waiter came for it, so none
  // is expected now); otherwise it takes what has sat through one of its looks (worker_loop).
  if (start_worker_ && !worker_.joinable()) {
    worker_ = std::thread([this] { worker_loop(); });
  } else if (worker_asleep_ || worker_starts_next_) {
    lock.unlock();
    worker_cv_.notify_one();
  }
  return work;
}

bool OperationQueue::begin_inline() {
  std::lock_guard lock(mu_);
  if (!queue_.empty() || running_) return false;  // keep issue order behind the queued work
  running_ = true;
  return true;
}

void OperationQueue::end_inline() {
  {
    std::lock_guard lock(mu_);
    running_ = false;
  }
  turn_cv_.notify_all();
}

bool OperationQueue::worker_asleep() {
  std::lock_guard lock(mu_);
  return worker_asleep_;
}

bool OperationQueue::worker_starts_next() {
  std::lock_guard lock(mu_);
  return worker_starts_next_;
}

bool OperationQueue::worker_starts_front() {
  std::lock_guard lock(mu_);
  return worker_starts_front_locked();
}

void OperationQueue::stop() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  lock.unlock();
  worker_cv_.notify_one();
  turn_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  lock.lock();
  turn_cv_.wait(lock, [&] { return !running_; });  // bounded by that operation's deadline
  for (Task& task : queue_) {
    task.state->complete(std::make_exception_ptr(
        Error(ErrorCode::aborted, std::string(task.name) + " on communicator '" + comm_name_ +
                                      "': the communicator was destroyed before it started")));
  }
  queue_.clear();
}

void OperationQueue::run_front(std::unique_lock<std::mutex>& lock, bool& owner_out, bool on_worker,
                               bool worker_starts_next) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  running_on_worker_ = on_worker ? task.state.get() : nullptr;
  worker_starts_next_ = worker_starts_next;
  lock.unlock();
  // The owner thread itself is out of the fabric while it is here; any other thread waits for it.
  const bool owner_thread = gate_.owned_by_this_thread();
  if (!owner_out && !owner_thread) gate_.wait_owner_out();
  task.state->complete(runner_(task));
  lock.lock();
  // Under the lock: the queued tasks' claims stay held until this thread pops the next one, so
  // the owner stays out meanwhile if this was not the last claim.
  owner_out = owner_thread || !gate_.release_claim();
  running_ = false;
  running_on_worker_ = nullptr;
  turn_cv_.notify_all();
  if (!on_worker && worker_starts_front_locked()) worker_cv_.notify_one();
}

bool OperationQueue::worker_starts_front_locked() const {
  return !running_ && !queue_.empty() &&
         (worker_starts_next_ || queue_.front().state->queue_index < hurried_through_);
}

void OperationQueue::hurry_locked(const Task& task) {
  hurried_through_ = std::max(hurried_through_, task.state->queue_index + 1);
  // Otherwise run_front wakes it at the end of the running operation.
  if (worker_starts_front_locked()) worker_cv_.notify_one();
}

const OperationQueue::Task* OperationQueue::find_locked(const WorkState& state) const {
  // The queue holds consecutive operations in issue order (they leave from the front only), so
  // an operation's place is its index less the front's. A search took two thirds of the time of
  // 30,000 queued all_reduces: each wait scanned the rest of the queue for an operation already
  // taken.
  if (queue_.empty()) return nullptr;
  const uint64_t front = queue_.front().state->queue_index;
  if (state.queue_index < front) return nullptr;
  const uint64_t place = state.queue_index - front;
  if (place >= queue_.size()) return nullptr;
  const Task& task = queue_[static_cast<size_t>(place)];
  return task.state.get() == &state ? &task : nullptr;
}

void OperationQueue::drive(const WorkState& state, const DriveRequest& request) {
  if (request.one_round) return hurry(state);
  drive_until_done(state, request);
}

void OperationQueue::hurry(const WorkState& state) {
  std::lock_guard lock(mu_);
  if (stopping_) return;
  if (const Task* task = find_locked(state)) hurry_locked(*task);
}

void OperationQueue::drive_until_done(const WorkState& state, const DriveRequest& request) {
  const bool timed = request.timed();
  // The worker starts everything queued at once (it ran the last operation and goes on): a
  // timed waiter would only take the lock from it.
  if (timed && worker_starts_next_.load(std::memory_order_relaxed)) return;
  // The caller worked between issuing the operation and waiting for it: the next one, issued as
  // this one was, is the worker's to start at once, so that it overlaps that work.
  const bool overlapping = Clock::now() - state.issued_at >= overlapping_waiter_;
  bool owner_out = false;
  std::unique_lock lock(mu_);
  auto my_turn = [&] { return stopping_ || !running_ || find_locked(state) == nullptr; };
  for (;;) {
    if (!my_turn()) {
      owner_out = false;  // the lock is given up: other threads may drop the last claim meanwhile
      if (!timed) {
        turn_cv_.wait(lock, my_turn);
      } else if (!turn_cv_.wait_until(lock, request.until, my_turn)) {
        return hurry_locked(*find_locked(state));  // still queued: my_turn() is false
      }
    }
    const Task* mine = stopping_ ? nullptr : find_locked(state);
    // Taken by another thread (or done), or failed by stop(): Work::wait waits on the state.
    if (mine == nullptr) {
      // The worker started it while this waiter was on the way: unless the caller overlaps, the
      // waiter would have run it, and the worker was woken too soon.
      if (running_on_worker_ == &state && state.deadline <= request.until) {
        worker_starts_next_ = overlapping;
      }
      return;
    }
    // A timed waiter cannot stop an operation midway at its time: it runs one only where the
    // operation's own deadline comes first (it ends by then either way).
    if (timed && queue_.front().state->deadline > request.until) return hurry_locked(*mine);
    // This operation or one issued before it. Where it is this one and it sat in the queue while
    // the caller worked, the worker starts the next one at once.
    const bool runs_mine = mine == &queue_.front();
    run_front(lock, owner_out, /*on_worker=*/false,
              /*worker_starts_next=*/runs_mine && overlapping);
  }
}

void OperationQueue::worker_loop() {
  bool owner_out = false;
  auto tick = kBackgroundTick;
  Clock::duration quiet{0};          // since the queue was last seen holding anything
  uint64_t issued_by_last_look = 0;  // operations issued before the worker's last look
  // Woken by enqueue where it ran the last operation, or by a hurried waiter: it starts at once.
  auto started_by_worker = [&] { return worker_starts_front_locked(); };
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // Queued since before the last look and nobody has taken it (its waiter is not on the way).
    if (started_by_worker() ||
        (!running_ && !queue_.empty() && queue_.front().state->queue_index < issued_by_last_look)) {
      run_front(lock, owner_out, /*on_worker=*/true, /*worker_starts_next=*/true);
      tick = kBackgroundTick;
      quiet = {};
      continue;  // awake anyway, and now worker_starts_next_: the rest goes at once
    }
    owner_out = false;  // the lock is given up: other threads may drop the last claim meanwhile
    issued_by_last_look = issued_;
    if (!queue_.empty()) {  // new work: the next look takes it unless its waiter comes first
      tick = kBackgroundTick;
      quiet = {};
    } else {
      // Waiters take what they issue (or nothing is issued): look less often, for each look
      // preempts a rank where the ranks fill the cores.
      tick = std::min(2 * tick, kBackgroundLongestTick);
      quiet += tick;
    }
    if (quiet <= kBackgroundQuietTicks * kBackgroundTick) {
      worker_cv_.wait_for(lock, tick, [&] { return stopping_ || started_by_worker(); });
      continue;
    }
    worker_asleep_ = true;  // until enqueue wakes it
    worker_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    worker_asleep_ = false;
    tick = kBackgroundTick;
    quiet = {};
  }
}

}  // namespace tpf::detail
