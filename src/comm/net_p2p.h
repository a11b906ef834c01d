// Point-to-point messages between ranks on different hosts, over the communicator's network.
// Messages between a pair match in issue order: the n-th send to a peer carries tag n of the
// point-to-point half of the tag space, the n-th receive from that peer takes tag n. A transfer
// is posted to UCX when it is issued, so whoever drives the network moves it (a blocking call's
// wait, a collective's, or an asynchronous transfer's): a rank's large send and its receive never
// wait on each other, and collectives keep their sequence numbers.
// An asynchronous transfer is moved by the thread that waits for it (Work::wait, and
// Work::wait_until up to its time), as a blocking
// call moves its own (so does the shared-memory P2pEngine): handing it to another thread and back
// cost a wake-up each way (an 8 B exchange between 2 hosts took 4-5x the blocking one's time). This
// engine's thread moves what nobody waits for, within about a millisecond (background progress
// while the rank computes). Messages between ranks of one host go through the shared-memory
// P2pEngine instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coll/op_desc.h"
#include "comm/flight_recorder.h"
#include "comm/work_state.h"
#include "tpf/comm.h"
#include "transport/ucx_network.h"

namespace tpf::detail {

class NetP2p : public std::enable_shared_from_this<NetP2p> {
 public:
  // The point-to-point half of the network's tags (collectives use the other half): below its
  // bit, the message's dtype and its index among the pair's messages in that direction. A receive
  // matches any dtype and then compares (a dtype of the same size would otherwise go unnoticed).
  static constexpr uint64_t kTagBit = uint64_t{1} << (transport::UcxNetwork::kTagBits - 1);
  static constexpr int kIndexBits = transport::UcxNetwork::kTagBits - 1 - 4;
  static constexpr uint64_t kDTypeBits = uint64_t{15} << kIndexBits;
  // Records a transfer's failure as the communicator's (first failure wins) and returns the error
  // every other transfer then fails with.
  using FailureSink = std::function<std::exception_ptr(std::exception_ptr)>;

  // Records each transfer in `recorder` (the communicator's, which outlives this engine).
  NetP2p(transport::UcxNetwork& network, int comm_size, std::string comm_name,
         FlightRecorder& recorder, FailureSink on_failure);
  ~NetP2p();
  NetP2p(const NetP2p&) = delete;
  NetP2p& operator=(const NetP2p&) = delete;

  // Transfers still pending are stopped and fail with Error(aborted); waiters moving them leave.
  // Called before the network goes: a waiter may hold this engine past its owner.
  void stop();

  // A validated send or recv to a rank on another host, done by `deadline`. Held by a shared_ptr:
  // the returned Work's waiter reaches this engine through a weak one.
  Work submit(const coll::OpDesc& desc, Clock::time_point deadline);
  void run(const coll::OpDesc& desc, Clock::time_point deadline);
  // Every pending and later transfer fails with `error` (the first given wins). Any thread.
  void fail_all(std::exception_ptr error);
  // Work's hook (drive_hook): moves the pending transfers until `state`'s is done or
  // `request.until` comes; or one round unless another thread is taking one (test).
  void drive(WorkState& state, const DriveRequest& request);

 private:
  struct Pending {
    coll::OpDesc desc;
    transport::NetRequest request;
    std::shared_ptr<WorkState> state;
    Clock::time_point deadline;
    std::string label;
    FlightRecorder::Slot flight;
  };
  // mu_ held: the transfer's flight record, under the index post_locked is about to take.
  FlightRecorder::Slot record_locked(const coll::OpDesc& desc);
  transport::NetRequest post_locked(const coll::OpDesc& desc);  // mu_ held: takes its index
  // Ends `p`'s record and completes its work with `error` (null: done).
  void complete(Pending& p, std::exception_ptr error);
  // Throws Error(mismatch) if a completed receive's sender sent another dtype.
  void check_dtype(const coll::OpDesc& desc, const transport::NetRequest& done) const;
  std::string label(const coll::OpDesc& desc) const;
  void fail_pending_locked(std::exception_ptr error);
  // One round over the pending transfers (mu_ held; released while failing them): completes what
  // finished, fails everything on the first error. `seen` gets the network's generation after it.
  bool advance_pending(std::unique_lock<std::mutex>& lock, uint64_t& seen);
  // Work::wait's: moves the pending transfers until `state` is done, `request.until` comes or the
  // engine stops.
  void drive_until_done(WorkState& state, const DriveRequest& request);
  // Work::test's: one round over the pending transfers, unless another thread is taking one.
  void poll_once();
  void progress_loop();

  transport::UcxNetwork& network_;
  const std::string comm_name_;
  FlightRecorder& recorder_;
  const FailureSink on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> sent_, received_;  // messages issued to / from each rank so far
  std::list<Pending> pending_;             // asynchronous transfers, oldest first
  std::exception_ptr failure_;             // set: everything fails with it
  bool stopping_ = false;
  int waiters_ = 0;  // threads in drive_until_done or poll_once
  // A transfer was issued or a waiter left since the thread last looked: it leaves the
  // transfers to their waiters for a tick more.
  bool leave_for_a_tick_ = false;
  bool thread_asleep_ = false;    // until submit wakes it (nothing was pending for a while)
  std::condition_variable left_;  // waiters_ fell
  std::thread thread_;  // moves what nobody waits for; started by the first asynchronous transfer
};

}  // namespace tpf::detail
