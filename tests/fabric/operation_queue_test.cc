// OperationQueue (comm/operation_queue.h): a communicator's collectives run one at a time in issue
// order, each on the first thread to reach it — a thread in Work::wait (which runs the queue up to
// its own operation) or the queue's worker (what nobody waits for). The tasks here only record
// where they ran; the communicators' tests run real collectives through it (CommAsync.*).
#include "comm/operation_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/async_waits.h"
#include "support/multiproc.h"
#include "tpf/error.h"

namespace tpf::detail {
namespace {

using Task = OperationQueue::Task;
constexpr auto kBound =
    std::chrono::milliseconds(60000);  // far beyond any step here; only bounds a bug

Clock::time_point far_deadline() { return Clock::now() + kBound; }

// Whether `work` ends without this thread touching it (Work::completed moves nothing): only the
// worker can have run it then.
bool ended_without_this_thread(const Work& work) {
  return tpf::testing::wait_until([&] { return work.completed(); }, kBound);
}

// A task numbered by its count.
Task numbered(size_t index) {
  Task task{coll::OpDesc{}, "all_reduce"};
  task.desc.count = index;
  return task;
}

// What ran, in order, and on which thread; at most one at a time.
class RunLog {
 public:
  void begin(size_t index) {
    std::lock_guard lock(mu_);
    ran_.push_back({index, std::this_thread::get_id()});
    ++inside_;
    most_inside_ = std::max(most_inside_, inside_);
  }
  void end() {
    std::lock_guard lock(mu_);
    --inside_;
  }
  std::vector<size_t> order() const {
    std::lock_guard lock(mu_);
    std::vector<size_t> order;
    for (const auto& [index, thread] : ran_) order.push_back(index);
    return order;
  }
  std::thread::id thread_of(size_t index) const {
    std::lock_guard lock(mu_);
    for (const auto& [i, thread] : ran_)
      if (i == index) return thread;
    return {};
  }
  int most_inside() const {
    std::lock_guard lock(mu_);
    return most_inside_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<size_t, std::thread::id>> ran_;
  int inside_ = 0;
  int most_inside_ = 0;
};

// Holds the tasks it is told to until released, and says when one has entered.
class Latch {
 public:
  void enter() {
    std::unique_lock lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait_for(lock, kBound, [&] { return released_; });
  }
  bool wait_entered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kBound, [&] { return entered_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool released_ = false;
};

// Whether a waiter counts as overlapping its caller's work is a matter of time in the queue
// (kOverlappingWaiter); tests fix the answer instead.
constexpr Clock::duration kEveryWaiterOverlaps = Clock::duration::zero();
constexpr Clock::duration kNoWaiterOverlaps = Clock::duration::max();

std::shared_ptr<OperationQueue> queue_logging_to(
    RunLog& log, bool start_worker, Latch* hold_first = nullptr,
    Clock::duration overlapping_waiter = kNoWaiterOverlaps) {
  return std::make_shared<OperationQueue>(
      false,
      [&log, hold_first](const Task& task) -> std::exception_ptr {
        log.begin(task.desc.count);
        if (hold_first && task.desc.count == 0) hold_first->enter();
        log.end();
        return nullptr;
      },
      "q", start_worker, overlapping_waiter);
}

TEST(OperationQueue, AWaiterRunsTheQueueUpToItsOwnOperationInIssueOrder) {
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/false);
  std::vector<Work> works;
  for (size_t i = 0; i < 5; ++i) works.push_back(queue->enqueue(numbered(i), far_deadline()));
  works[2].wait();
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1, 2}));
  for (size_t i = 0; i <= 2; ++i) EXPECT_EQ(log.thread_of(i), std::this_thread::get_id()) << i;
  // test() does not start a collective (it could block until the peers join).
  EXPECT_FALSE(works[3].test());
  EXPECT_FALSE(works[4].test());
  std::thread::id other_id;
  std::thread other([&] {
    other_id = std::this_thread::get_id();
    works[4].wait();
  });
  other.join();
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(log.thread_of(3), other_id);
  EXPECT_EQ(log.thread_of(4), other_id);
  EXPECT_TRUE(works[0].test() && works[3].test());
}

// A waiter finds its operation by its place from the queue's front (issue order), which moves as
// operations leave: waits in and out of order, on operations queued, run and long gone.
TEST(OperationQueue, WaitersFindTheirOperationsWhereverTheFrontHasMoved) {
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/false);
  constexpr size_t kQueued = 1000;
  std::vector<Work> works;
  for (size_t i = 0; i < kQueued; ++i) works.push_back(queue->enqueue(numbered(i), far_deadline()));
  works[500].wait();  // runs 0 .. 500
  EXPECT_EQ(log.order().size(), 501u);
  works[100].wait();  // long gone: returns at once
  works[501].wait();  // now the front
  EXPECT_FALSE(works[502].test());
  works[kQueued - 1].wait();  // the back
  std::vector<size_t> all(kQueued);
  for (size_t i = 0; i < kQueued; ++i) all[i] = i;
  EXPECT_EQ(log.order(), all);
  for (size_t i = 0; i < kQueued; ++i) EXPECT_TRUE(works[i].test()) << i;
  // Issued after the queue emptied: its place counts from its own index.
  Work later = queue->enqueue(numbered(kQueued), far_deadline());
  later.wait();
  EXPECT_EQ(log.order().back(), kQueued);
}

TEST(OperationQueue, TheWorkerRunsWhatNobodyWaitsFor) {
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/true);
  std::vector<Work> works;
  for (size_t i = 0; i < 3; ++i) works.push_back(queue->enqueue(numbered(i), far_deadline()));
  ASSERT_TRUE(ended_without_this_thread(works[2]));
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1, 2}));
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(log.thread_of(i), std::this_thread::get_id()) << i;
  // Quiet for a while, the worker sleeps until an enqueue wakes it.
  ASSERT_TRUE(tpf::testing::wait_until([&] { return queue->worker_asleep(); }, kBound));
  Work after_sleep = queue->enqueue(numbered(3), far_deadline());
  ASSERT_TRUE(ended_without_this_thread(after_sleep));
  EXPECT_NE(log.thread_of(3), std::this_thread::get_id());
}

// The worker is woken to start an operation at once where it ran the last one and no waiter came;
// a waiter right behind its operation that finds the worker running it turns that off.
TEST(OperationQueue, TheWorkerStartsTheNextAtOnceOnlyWhileNoWaiterComes) {
  RunLog log;
  Latch hold_second;
  auto queue = std::make_shared<OperationQueue>(
      false,
      [&](const Task& task) -> std::exception_ptr {
        log.begin(task.desc.count);
        if (task.desc.count == 1) hold_second.enter();
        log.end();
        return nullptr;
      },
      "q", /*start_worker=*/true, kNoWaiterOverlaps);
  EXPECT_FALSE(queue->worker_starts_next());
  Work first = queue->enqueue(numbered(0), far_deadline());
  ASSERT_TRUE(ended_without_this_thread(first));
  EXPECT_TRUE(queue->worker_starts_next());
  Work second = queue->enqueue(numbered(1), far_deadline());
  ASSERT_TRUE(hold_second.wait_entered());  // nobody but the worker runs it either
  EXPECT_NE(log.thread_of(1), std::this_thread::get_id());
  EXPECT_TRUE(queue->worker_starts_next());
  tpf::testing::WaitOnAnotherThread waiter(second);  // finds it running on the worker
  EXPECT_TRUE(tpf::testing::wait_until([&] { return !queue->worker_starts_next(); }, kBound));
  hold_second.release();
  waiter.join();
  EXPECT_FALSE(queue->worker_starts_next());
}

// A waiter that comes a while after its operation was issued overlaps its caller's work with it:
// the worker starts the next operation at once, whether this one sat in the queue (the waiter ran
// it) or the worker was running it when the waiter came.
TEST(OperationQueue, AWaiterThatOverlapsHasTheWorkerStartTheNextAtOnce) {
  for (const Clock::duration overlapping_waiter : {kNoWaiterOverlaps, kEveryWaiterOverlaps}) {
    const bool overlaps = overlapping_waiter == kEveryWaiterOverlaps;
    SCOPED_TRACE(overlaps ? "every waiter overlaps" : "no waiter overlaps");
    RunLog log;
    auto queue = queue_logging_to(log, /*start_worker=*/false, nullptr, overlapping_waiter);
    queue->enqueue(numbered(0), far_deadline()).wait();  // no worker: this thread runs it
    EXPECT_EQ(log.thread_of(0), std::this_thread::get_id());
    EXPECT_EQ(queue->worker_starts_next(), overlaps);
  }
  RunLog log;
  Latch latch;
  auto queue = queue_logging_to(log, /*start_worker=*/true, &latch, kEveryWaiterOverlaps);
  Work first = queue->enqueue(numbered(0), far_deadline());
  ASSERT_TRUE(latch.wait_entered());  // the worker runs it: nobody waits for it yet
  tpf::testing::WaitOnAnotherThread waiter(first);
  latch.release();
  waiter.join();
  EXPECT_TRUE(queue->worker_starts_next());  // however the waiter found it, running or done
  Work second = queue->enqueue(numbered(1), far_deadline());
  ASSERT_TRUE(ended_without_this_thread(second));
  EXPECT_NE(log.thread_of(1), std::this_thread::get_id());
}

// Work::test cannot move a collective one round at a time: it has the worker start the polled
// operation, and those queued before it, at once (not at the worker's next look), and never runs
// one on the polling thread.
TEST(OperationQueue, APollerHasTheWorkerStartItsOperationAtOnce) {
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/false);
  Work first = queue->enqueue(numbered(0), far_deadline());
  Work second = queue->enqueue(numbered(1), far_deadline());
  EXPECT_FALSE(queue->worker_starts_front());
  EXPECT_FALSE(second.test());  // no worker here: nothing runs it, and the poll returns
  EXPECT_TRUE(log.order().empty());
  EXPECT_TRUE(queue->worker_starts_front());
  first.wait();                               // a waiter runs its own
  EXPECT_TRUE(queue->worker_starts_front());  // the polled one is still the worker's at once
  second.wait();
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1}));
  EXPECT_FALSE(queue->worker_starts_front());
}

TEST(OperationQueue, OneRunsAtATimeAndAWaiterWaitsForTheOneRunningElsewhere) {
  RunLog log;
  Latch latch;
  auto queue = queue_logging_to(log, /*start_worker=*/false, &latch);
  Work first = queue->enqueue(numbered(0), far_deadline());
  std::thread runs_first([&] { first.wait(); });
  ASSERT_TRUE(latch.wait_entered());
  EXPECT_FALSE(queue->begin_inline());  // a blocking call would queue behind it
  Work second = queue->enqueue(numbered(1), far_deadline());
  std::thread::id second_waiter;
  std::thread waits_second([&] {
    second_waiter = std::this_thread::get_id();
    second.wait();
  });
  latch.release();
  waits_second.join();
  runs_first.join();
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(log.thread_of(1), second_waiter);
  EXPECT_EQ(log.most_inside(), 1);
  // Nothing queued or running: a blocking call runs inline, and holds queued work back meanwhile.
  ASSERT_TRUE(queue->begin_inline());
  Work third = queue->enqueue(numbered(2), far_deadline());
  EXPECT_FALSE(queue->begin_inline());
  queue->end_inline();
  third.wait();
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1, 2}));
}

// A timed waiter runs an operation itself only where the operation's own deadline comes before
// its time (the operation ends by then either way); one it could not stop at its time it leaves
// to the worker, told to start everything up to it at once.
TEST(OperationQueue, ATimedWaiterRunsOnlyWhatEndsBeforeItsTime) {
  {
    RunLog log;
    auto queue = queue_logging_to(log, /*start_worker=*/false);
    Work early = queue->enqueue(numbered(0), Clock::now() + kBound);
    ASSERT_TRUE(early.wait_until(Clock::now() + 2 * kBound));  // no worker: this thread runs it
    EXPECT_EQ(log.thread_of(0), std::this_thread::get_id());
    // Its time before the deadline, and no worker: nothing runs it, and the wait ends unfinished.
    Work late = queue->enqueue(numbered(1), Clock::now() + 10 * kBound);
    EXPECT_FALSE(late.wait_for(std::chrono::milliseconds(1)));
    EXPECT_EQ(log.order(), (std::vector<size_t>{0}));
    late.wait();  // a wait without a time runs it
    EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1}));
  }
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/true);
  Work early = queue->enqueue(numbered(0), Clock::now() + kBound);
  Work late = queue->enqueue(numbered(1), Clock::now() + 10 * kBound);
  ASSERT_TRUE(late.wait_for(2 * kBound));  // the worker runs it (and whatever is left before it)
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1}));
  EXPECT_NE(log.thread_of(1), std::this_thread::get_id());
  EXPECT_TRUE(early.test());
}

// A timed waiter behind an operation that another thread runs leaves its own to the worker when
// its time comes first.
TEST(OperationQueue, ATimedWaiterBehindARunningOperationLeavesItsOwnToTheWorker) {
  RunLog log;
  Latch latch;
  auto queue = queue_logging_to(log, /*start_worker=*/true, &latch);
  Work first = queue->enqueue(numbered(0), far_deadline());
  tpf::testing::WaitOnAnotherThread runs_first(first);
  ASSERT_TRUE(latch.wait_entered());
  Work second = queue->enqueue(numbered(1), far_deadline());
  EXPECT_FALSE(second.wait_for(std::chrono::milliseconds(1)));  // the first still runs
  latch.release();
  runs_first.join();
  ASSERT_TRUE(ended_without_this_thread(second));
  EXPECT_EQ(log.order(), (std::vector<size_t>{0, 1}));
  EXPECT_NE(log.thread_of(1), std::this_thread::get_id());
}

TEST(OperationQueue, AFailureReachesTheWaiterOfItsOperationOnly) {
  auto queue = std::make_shared<OperationQueue>(
      false,
      [](const Task& task) -> std::exception_ptr {
        if (task.desc.count != 1) return nullptr;
        return std::make_exception_ptr(Error(ErrorCode::mismatch, "task 1 failed"));
      },
      "q", /*start_worker=*/false);
  std::vector<Work> works;
  for (size_t i = 0; i < 3; ++i) works.push_back(queue->enqueue(numbered(i), far_deadline()));
  works[2].wait();  // runs all three; the failure belongs to the second
  EXPECT_TRUE(works[0].test());
  try {
    works[1].wait();
    ADD_FAILURE() << "the failed task's wait returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::mismatch);
    EXPECT_STREQ(e.what(), "task 1 failed");
  }
}

void expect_aborted(Work& work, const std::string& why) {
  try {
    work.wait();
    ADD_FAILURE() << "the wait returned; expected: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::aborted);
    EXPECT_NE(std::string(e.what()).find("communicator 'q'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(OperationQueue, StopFailsWhatHasNotStartedAndWhatComesAfter) {
  RunLog log;
  auto queue = queue_logging_to(log, /*start_worker=*/false);
  Work queued = queue->enqueue(numbered(0), far_deadline());
  queue->stop();
  expect_aborted(queued, "destroyed before it started");
  Work late = queue->enqueue(numbered(1), far_deadline());
  expect_aborted(late, "being destroyed");
  queue.reset();  // a Work may outlive its queue: waiting again only reads its state
  expect_aborted(queued, "destroyed before it started");
  EXPECT_TRUE(log.order().empty());
}

}  // namespace
}  // namespace tpf::detail
