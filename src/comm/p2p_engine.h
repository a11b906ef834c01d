// The point-to-point engine of a communicator: every send and recv becomes a P2pTransfer, queued
// per peer and direction (messages between a pair match in issue order, as in MPI), and one
// driver advances all of them chunk by chunk without waiting on any single one. So a rank's large
// send never holds up its own receive (rings of large messages, 1F1B pipeline exchanges), and
// point-to-point traffic neither uses nor disturbs the collectives' sequence numbers: ranks that
// do not take part in a send/recv stay in step for the next collective.
//
// The driver is whichever thread holds the role: a blocking send/recv drives inline when nobody
// else does, and so does a thread waiting for an asynchronous transfer (Work::wait, and
// Work::wait_until up to its time): no thread hand-off on the latency path (handing an 8 B
// exchange to another thread and back took 5x the blocking exchange's time). A progress thread,
// started on the first asynchronous call, drives what nobody waits for: it looks once a
// millisecond and hands the role to any waiter.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coll/p2p_transfer.h"
#include "comm/flight_recorder.h"
#include "comm/work_state.h"
#include "tpf/comm.h"
#include "transport/shm_fabric.h"

namespace tpf::detail {

class P2pEngine : public std::enable_shared_from_this<P2pEngine> {
 public:
  // Records a failure of a transfer as the communicator's (first failure wins) and returns the
  // error every other transfer should then fail with.
  using FailureSink = std::function<std::exception_ptr(std::exception_ptr)>;

  // Records every transfer in `recorder` (which outlives the engine).
  P2pEngine(transport::ShmFabric& fabric, std::string comm_name, FlightRecorder& recorder,
            FailureSink on_failure);
  ~P2pEngine();
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  // Transfers still pending fail with Error(aborted); waiters driving them leave. Called before
  // the fabric goes: a waiter may hold this engine past its owner.
  void stop();

  // Queues a validated send or recv that must be done by `deadline`. Held by a shared_ptr: the
  // returned Work's waiter reaches this engine through a weak one.
  Work submit(const coll::OpDesc& desc, Clock::time_point deadline);
  // Queues it and returns when it is done (rethrowing its error); drives everything meanwhile if
  // no other thread does.
  void run(const coll::OpDesc& desc, Clock::time_point deadline);
  // Every pending and later transfer fails with `error` (abort, or a failure elsewhere on the
  // communicator). Any thread; the first error given wins.
  void fail_all(std::exception_ptr error);
  // Work's hook (drive_hook): moves every transfer until `state`'s is done or `request.until`
  // comes, taking the driver role once it is free; or one round where the role is free (test).
  void drive(WorkState& state, const DriveRequest& request);

 private:
  // The outcome of a blocking call that drives its own transfer: no WorkState, no allocation.
  struct InlineResult {
    bool done = false;
    std::exception_ptr error;
  };
  struct Pending {
    coll::P2pTransfer transfer;
    std::shared_ptr<WorkState> state;  // an asynchronous call's; or
    InlineResult* inline_result;       // the driving blocking call's
    Clock::time_point deadline;
    uint64_t index;  // the n-th message of this rank to (send) or from (recv) that peer
    FlightRecorder::Slot flight;
  };
  // The transfers to or from one peer in one direction, in issue order. A vector and a head
  // index, so that the steady state allocates nothing.
  class Lane {
   public:
    bool empty() const noexcept { return head_ == items_.size(); }
    Pending& front() noexcept { return items_[head_]; }
    const Pending& front() const noexcept { return items_[head_]; }
    void push_back(Pending p) { items_.push_back(std::move(p)); }
    void pop_front() noexcept {
      if (++head_ == items_.size()) clear();
    }
    void clear() noexcept {
      items_.clear();
      head_ = 0;
    }
    auto begin() noexcept { return items_.begin() + static_cast<ptrdiff_t>(head_); }
    auto end() noexcept { return items_.end(); }

   private:
    std::vector<Pending> items_;
    size_t head_ = 0;
  };
  void complete(Pending& p, std::exception_ptr error);
  // The queued form of a validated call, its index taken from `issued` (with mu_ held).
  Pending make_pending(const coll::OpDesc& desc, Clock::time_point deadline,
                       std::shared_ptr<WorkState> state, InlineResult* inline_result);
  std::shared_ptr<WorkState> enqueue(const coll::OpDesc& desc, Clock::time_point deadline);
  void take_incoming_locked();  // with mu_ held
  // Drives until done() holds or nothing is pending, sleeping no later than `until` (when done()
  // looks at the time). Only the holder of the driver role.
  void move_until(const std::function<bool()>& done,
                  Clock::time_point until = Clock::time_point::max());
  // Work::wait's: takes the driver role once it is free and drives until `state` is done or
  // `request.until` comes.
  void drive_until_done(WorkState& state, const DriveRequest& request);
  // Work::test's: one round of the driver where the role is free.
  void poll_once();
  void take_incoming();
  // Advances every queue's head as far as it goes, completing finished transfers.
  bool advance_all();
  bool any_ready() const;
  // Peer deaths and failures, deadlines, and failures from elsewhere; fails everything if so.
  void check_stalled();
  void fail_pending(std::exception_ptr error);
  std::string label(const Pending& p) const;
  transport::WaitContext context(const Pending& p) const;
  void progress_loop();

  transport::ShmFabric& fabric_;
  const std::string comm_name_;
  FlightRecorder& recorder_;
  const FailureSink on_failure_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> incoming_;            // guarded by mu_
  std::vector<uint64_t> sends_issued_;       // guarded by mu_; per peer
  std::vector<uint64_t> recvs_issued_;       // guarded by mu_; per peer
  bool driving_ = false;                     // guarded by mu_; some thread holds the driver role
  bool stopping_ = false;                    // guarded by mu_
  std::atomic<bool> stop_requested_{false};  // stopping_, readable by the driver without the lock
  std::exception_ptr failure_;               // guarded by mu_; once set, everything fails with it
  std::atomic<bool> has_incoming_{false};    // incoming_ is not empty
  std::atomic<bool> has_failure_{false};     // failure_ is set
  // Threads in drive_until_done (changed under mu_; the progress thread reads it while driving,
  // to hand the role over).
  std::atomic<int> waiters_{0};
  // A transfer was issued or a waiter left since the progress thread last looked: it leaves the
  // transfers to their waiters for a tick more (guarded by mu_).
  bool leave_for_a_tick_ = false;
  int pollers_ = 0;                    // guarded by mu_; threads in poll_once
  bool thread_asleep_ = false;         // guarded by mu_; until submit wakes it
  std::condition_variable role_free_;  // the driver role was released, or a waiter left
  std::thread thread_;

  // The driver's own state (only the holder of the role touches it).
  std::vector<Lane> sends_;  // per peer
  std::vector<Lane> recvs_;
  size_t pending_ = 0;
};

}  // namespace tpf::detail
