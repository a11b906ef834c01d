#include "comm/net_p2p.h"

#include "comm/background_progress.h"
#include "tpf/error.h"

namespace tpf::detail {

NetP2p::NetP2p(transport::UcxNetwork& network, int comm_size, std::string comm_name,
               FlightRecorder& recorder, FailureSink on_failure)
    : network_(network),
      comm_name_(std::move(comm_name)),
      recorder_(recorder),
      on_failure_(std::move(on_failure)),
      sent_(comm_size, 0),
      received_(comm_size, 0) {}

NetP2p::~NetP2p() { stop(); }

void NetP2p::stop() {
  std::unique_lock lock(mu_);
  if (stopping_) return;  // stopped before: as in P2pEngine::stop, the network may be gone
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  lock.lock();
  left_.wait(lock, [&] { return waiters_ == 0; });  // each leaves within a round or a tick
  fail_pending_locked(
      std::make_exception_ptr(Error(ErrorCode::aborted, "communicator '" + comm_name_ +
                                                            "' was destroyed before a send or "
                                                            "recv across hosts finished")));
}

std::string NetP2p::label(const coll::OpDesc& desc) const {
  return std::string(coll::op_kind_name(desc.kind)) +
         (desc.kind == coll::OpKind::send ? " to " : " from ") + network_.names()(desc.peer) +
         " on communicator '" + comm_name_ + "' (across hosts)";
}

FlightRecorder::Slot NetP2p::record_locked(const coll::OpDesc& desc) {
  const bool send = desc.kind == coll::OpKind::send;
  const uint64_t index = (send ? sent_ : received_)[desc.peer];
  return recorder_.begin(desc.kind, desc.dtype, desc.count, desc.peer, index);
}

transport::NetRequest NetP2p::post_locked(const coll::OpDesc& desc) {
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  const uint64_t dtype = static_cast<uint64_t>(desc.dtype) << kIndexBits;
  if (desc.kind == coll::OpKind::send) {
    return network_.send(desc.peer, kTagBit | dtype | sent_[desc.peer]++, desc.send, bytes);
  }
  return network_.recv(desc.peer, kTagBit | dtype | received_[desc.peer]++, desc.recv, bytes,
                       kDTypeBits);
}

void NetP2p::check_dtype(const coll::OpDesc& desc, const transport::NetRequest& done) const {
  if (desc.kind != coll::OpKind::recv) return;
  const auto sent = static_cast<DType>((done.received_tag & kDTypeBits) >> kIndexBits);
  if (sent == desc.dtype) return;
  throw Error(ErrorCode::mismatch, label(desc) + ": " + network_.names()(desc.peer) + " sent " +
                                       dtype_name(sent) + " data where " + dtype_name(desc.dtype) +
                                       " was expected (" + std::to_string(done.bytes) +
                                       " bytes either way)");
}

void NetP2p::run(const coll::OpDesc& desc, Clock::time_point deadline) {
  transport::NetRequest request;
  FlightRecorder::Slot flight = FlightRecorder::kNoSlot;
  {
    std::lock_guard lock(mu_);
    if (failure_) std::rethrow_exception(failure_);
  }
  const std::string what = label(desc);
  try {
    {
      // Posting may fail too: the first transfer with a peer connects to it (a peer whose
      // process is gone, or that never made its network), and the communicator records it.
      std::lock_guard lock(mu_);
      flight = record_locked(desc);
      request = post_locked(desc);
    }
    network_.wait_all(std::span<transport::NetRequest>(&request, 1),
                      transport::WaitContext::with_deadline(deadline, [&] { return what; }));
    check_dtype(desc, request);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    recorder_.end(flight, error);
    on_failure_(error);
    std::rethrow_exception(error);
  }
  recorder_.end(flight, FlightState::completed);
}

void NetP2p::complete(Pending& p, std::exception_ptr error) {
  recorder_.end(p.flight, error);
  p.state->complete(std::move(error));
}

Work NetP2p::submit(const coll::OpDesc& desc, Clock::time_point deadline) {
  auto state = std::make_shared<WorkState>();
  state->deadline = deadline;
  state->drive = drive_hook(weak_from_this(), *state);
  std::unique_lock lock(mu_);
  if (failure_ || stopping_) {
    state->complete(failure_ ? failure_
                             : std::make_exception_ptr(
                                   Error(ErrorCode::aborted, label(desc) + ": the communicator is "
                                                                           "being destroyed")));
    return Work(state);
  }
  transport::NetRequest request;
  const FlightRecorder::Slot flight = record_locked(desc);
  try {
    request = post_locked(desc);
  } catch (...) {  // as run(): recorded, and the work fails with it
    lock.unlock();
    const std::exception_ptr error = std::current_exception();
    recorder_.end(flight, error);
    state->complete(on_failure_(error));
    return Work(state);
  }
  pending_.push_back({desc, request, state, deadline, label(desc), flight});
  leave_for_a_tick_ = true;  // its waiter is probably on the way
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { progress_loop(); });
  } else if (thread_asleep_) {
    lock.unlock();
    cv_.notify_all();
  }
  return Work(state);
}

void NetP2p::fail_all(std::exception_ptr error) {
  std::lock_guard lock(mu_);
  if (!failure_) failure_ = error;
  fail_pending_locked(failure_);
}

void NetP2p::fail_pending_locked(std::exception_ptr error) {
  for (Pending& p : pending_) {
    network_.cancel(std::span<transport::NetRequest>(&p.request, 1));  // its buffer is free now
    complete(p, error);
  }
  pending_.clear();
}

bool NetP2p::advance_pending(std::unique_lock<std::mutex>& lock, uint64_t& seen) {
  bool completed = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::string& what = it->label;
    try {
      const auto ctx = transport::WaitContext::with_deadline(it->deadline, [&] { return what; });
      const auto progress =
          network_.advance(std::span<transport::NetRequest>(&it->request, 1), ctx);
      seen = progress.generation;
      if (progress.done) {
        check_dtype(it->desc, it->request);
        complete(*it, nullptr);
        it = pending_.erase(it);
        completed = true;
        continue;
      }
      if (Clock::now() >= it->deadline) {
        network_.cancel(std::span<transport::NetRequest>(&it->request, 1));
        throw Error(ErrorCode::timeout, what + ": timed out (is the peer calling the matching " +
                                            std::string(it->request.is_send ? "recv" : "send") +
                                            "?)");
      }
      ++it;
    } catch (...) {
      // The failing transfer's request is stopped already; the others fail with the first error.
      const std::exception_ptr error = std::current_exception();
      Pending failed = std::move(*it);
      pending_.erase(it);
      lock.unlock();
      recorder_.end(failed.flight, error);  // before the communicator's failure dumps it
      const std::exception_ptr first = on_failure_(error);  // calls fail_all: takes mu_
      complete(failed, error);
      lock.lock();
      if (!failure_) failure_ = first;
      fail_pending_locked(failure_);
      return true;
    }
  }
  return completed;
}

void NetP2p::drive(WorkState& state, const DriveRequest& request) {
  if (request.one_round) return poll_once();
  drive_until_done(state, request);
}

void NetP2p::drive_until_done(WorkState& state, const DriveRequest& request) {
  auto done = [&] {
    std::lock_guard state_lock(state.mu);
    return state.done;
  };
  const bool timed = request.timed();
  std::unique_lock lock(mu_);
  if (stopping_) return;  // stop() fails what is pending; the network may be gone
  ++waiters_;
  transport::UcxNetwork::Idle idle = network_.idle();
  while (!stopping_ && !pending_.empty() && !done()) {
    uint64_t seen = 0;
    if (advance_pending(lock, seen)) {
      idle.progressed();
      continue;
    }
    // The network sleeps whole milliseconds: a timed wait ends within one of its time.
    if (timed && Clock::now() >= request.until) break;
    lock.unlock();  // other waiters may take a round meanwhile
    if (idle.should_sleep()) {
      network_.wait_for_news(kBackgroundTick, seen);
      idle.slept();
    }
    lock.lock();
  }
  --waiters_;
  leave_for_a_tick_ = true;  // the thread looks again a tick later: the waiter may be back
  if (waiters_ == 0) left_.notify_all();
}

void NetP2p::poll_once() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || stopping_) return;  // another thread is taking a round
  ++waiters_;  // stop() waits for it: the failure path below releases mu_ for a moment
  uint64_t seen = 0;
  advance_pending(lock, seen);
  --waiters_;
  if (waiters_ == 0) left_.notify_all();
}

void NetP2p::progress_loop() {
  std::unique_lock lock(mu_);
  int quiet_ticks = 0;
  while (!stopping_) {
    if (pending_.empty()) {
      if (quiet_ticks < kBackgroundQuietTicks) {
        ++quiet_ticks;
        cv_.wait_for(lock, kBackgroundTick, [&] { return stopping_; });
      } else {
        thread_asleep_ = true;
        cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        thread_asleep_ = false;
      }
      continue;
    }
    quiet_ticks = 0;
    if (waiters_ > 0 || leave_for_a_tick_) {
      leave_for_a_tick_ = false;
      cv_.wait_for(lock, kBackgroundTick, [&] { return stopping_; });
      continue;
    }
    uint64_t seen = 0;
    if (!advance_pending(lock, seen) && !pending_.empty()) {
      lock.unlock();
      network_.wait_for_news(kBackgroundTick, seen);
      lock.lock();
    }
  }
}

}  // namespace tpf::detail
