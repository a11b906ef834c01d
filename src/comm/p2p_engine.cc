#include "comm/p2p_engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>

#include "comm/background_progress.h"
#include "tpf/error.h"
#include "transport/signal.h"

namespace tpf::detail {

P2pEngine::P2pEngine(transport::ShmFabric& fabric, std::string comm_name, FlightRecorder& recorder,
                     FailureSink on_failure)
    : fabric_(fabric),
      comm_name_(std::move(comm_name)),
      recorder_(recorder),
      on_failure_(std::move(on_failure)),
      sends_issued_(fabric.size(), 0),
      recvs_issued_(fabric.size(), 0),
      sends_(fabric.size()),
      recvs_(fabric.size()) {}

P2pEngine::~P2pEngine() { stop(); }

void P2pEngine::stop() {
  {
    std::lock_guard lock(mu_);
    // Stopped before (CommImpl's destructor), and this is the destructor of the last reference,
    // which a waiter's hook may hold past its communicator: the fabric may be gone by now.
    if (stopping_) return;
    stopping_ = true;
    stop_requested_.store(true);
  }
  cv_.notify_all();
  role_free_.notify_all();
  fabric_.wake_p2p();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mu_);
  // Each leaves within a poll.
  role_free_.wait(lock, [&] { return waiters_.load() == 0 && pollers_ == 0; });
  // No driver is left: whatever is still queued never started moving or cannot finish.
  take_incoming_locked();
  lock.unlock();
  fail_pending(std::make_exception_ptr(Error(
      ErrorCode::aborted,
      "communicator '" + comm_name_ + "' was destroyed before its point-to-point transfer ended")));
}

std::string P2pEngine::label(const Pending& p) const {
  const coll::OpDesc& d = p.transfer.desc();
  const bool send = d.kind == coll::OpKind::send;
  return std::string(send ? "send" : "recv") + " #" + std::to_string(p.index) +
         (send ? " to " : " from ") + fabric_.rank_name(d.peer) +
         " (count=" + std::to_string(d.count) + ", dtype=" + dtype_name(d.dtype) +
         ") on communicator '" + comm_name_ + "' (" + fabric_.rank_name(fabric_.rank()) + ")";
}

transport::WaitContext P2pEngine::context(const Pending& p) const {
  return transport::WaitContext::with_deadline(p.deadline, [this, &p] { return label(p); });
}

std::shared_ptr<WorkState> P2pEngine::enqueue(const coll::OpDesc& desc,
                                              Clock::time_point deadline) {
  auto state = std::make_shared<WorkState>();
  state->deadline = deadline;
  state->drive = drive_hook(weak_from_this(), *state);
  std::unique_lock lock(mu_);
  if (failure_ || stopping_) {
    state->complete(failure_ ? failure_
                             : std::make_exception_ptr(
                                   Error(ErrorCode::aborted, "communicator '" + comm_name_ +
                                                                 "' is being destroyed: no more "
                                                                 "point-to-point transfers")));
    return state;
  }
  incoming_.push_back(make_pending(desc, deadline, state, nullptr));
  has_incoming_.store(true, std::memory_order_seq_cst);
  return state;
}

Work P2pEngine::submit(const coll::OpDesc& desc, Clock::time_point deadline) {
  std::shared_ptr<WorkState> state = enqueue(desc, deadline);
  bool wake_thread = false;
  {
    std::lock_guard lock(mu_);
    leave_for_a_tick_ = true;  // its waiter is probably on the way
    if (!thread_.joinable() && !stopping_) {
      thread_ = std::thread([this] { progress_loop(); });
    } else {
      wake_thread = thread_asleep_;
    }
  }
  if (wake_thread) cv_.notify_all();
  fabric_.wake_p2p();  // a driver asleep on the mailboxes takes it
  return Work(state);
}

void P2pEngine::run(const coll::OpDesc& desc, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  if (failure_) std::rethrow_exception(failure_);
  if (driving_) {  // another thread drives (or the progress thread, should that one stop)
    lock.unlock();
    submit(desc, deadline).wait();
    return;
  }
  // This thread drives. Its transfer joins its queue behind everything issued before it.
  driving_ = true;
  take_incoming_locked();
  InlineResult result;
  (desc.kind == coll::OpKind::send ? sends_ : recvs_)[desc.peer].push_back(
      make_pending(desc, deadline, nullptr, &result));
  ++pending_;
  lock.unlock();
  move_until([&] { return result.done; });
  lock.lock();
  driving_ = false;
  const bool more = pending_ > 0 || !incoming_.empty();
  bool wake_thread = false;
  if (more && !thread_.joinable() && !stopping_) {
    thread_ = std::thread([this] { progress_loop(); });
  } else {
    wake_thread = more && thread_asleep_;
  }
  lock.unlock();
  role_free_.notify_all();  // a waiter for the role
  if (wake_thread) cv_.notify_all();
  if (result.error) std::rethrow_exception(result.error);
}

P2pEngine::Pending P2pEngine::make_pending(const coll::OpDesc& desc, Clock::time_point deadline,
                                           std::shared_ptr<WorkState> state,
                                           InlineResult* inline_result) {
  const uint64_t index =
      (desc.kind == coll::OpKind::send ? sends_issued_ : recvs_issued_)[desc.peer]++;
  // Recorded by the communicator's number: the fabric numbers one host's ranks.
  const int peer = fabric_.comm_rank(desc.peer);
  return Pending{coll::P2pTransfer(desc, fabric_.p2p_chunk_bytes()),
                 std::move(state),
                 inline_result,
                 deadline,
                 index,
                 recorder_.begin(desc.kind, desc.dtype, desc.count, peer, index)};
}

void P2pEngine::complete(Pending& p, std::exception_ptr error) {
  recorder_.end(p.flight, error);
  if (p.state) {
    p.state->complete(std::move(error));
    // Its waiter may be waiting for the driver role (drive_until_done) rather than on the state.
    if (waiters_.load() > 0) {
      { std::lock_guard lock(mu_); }  // so the notice cannot fall between its check and its wait
      role_free_.notify_all();
    }
    return;
  }
  p.inline_result->error = std::move(error);
  p.inline_result->done = true;
}

void P2pEngine::fail_all(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (failure_) return;
    failure_ = std::move(error);
    has_failure_.store(true, std::memory_order_seq_cst);
  }
  cv_.notify_all();
  fabric_.wake_p2p();
}

void P2pEngine::drive(WorkState& state, const DriveRequest& request) {
  if (request.one_round) return poll_once();
  drive_until_done(state, request);
}

void P2pEngine::drive_until_done(WorkState& state, const DriveRequest& request) {
  auto done = [&] {
    std::lock_guard state_lock(state.mu);
    return state.done;
  };
  const bool timed = request.timed();
  const Clock::time_point until = request.until;
  std::unique_lock lock(mu_);
  if (stopping_) return;  // stop() fails what is pending; the fabric may be gone
  waiters_.fetch_add(1);
  fabric_.wake_p2p();  // a driver asleep on the mailboxes: the progress thread hands the role over
  // The holder (the progress thread, or a blocking call until its own transfer is done) may
  // complete this transfer meanwhile.
  auto role_free = [&] { return stopping_ || !driving_ || done(); };
  if (timed) {
    role_free_.wait_until(lock, until, role_free);
  } else {
    role_free_.wait(lock, role_free);
  }
  if (!stopping_ && !driving_ && !done()) {
    driving_ = true;
    take_incoming_locked();
    lock.unlock();
    move_until(
        [&] {
          return stop_requested_.load(std::memory_order_relaxed) || done() ||
                 (timed && Clock::now() >= until);
        },
        until);
    lock.lock();
    driving_ = false;
  }
  waiters_.fetch_sub(1);
  leave_for_a_tick_ = true;  // the progress thread looks again a tick later: the waiter may be back
  lock.unlock();
  role_free_.notify_all();  // another waiter for the role, or stop()
}

void P2pEngine::poll_once() {
  {
    std::lock_guard lock(mu_);
    if (driving_ || stopping_) return;  // the holder moves it
    driving_ = true;
    ++pollers_;
  }
  move_until([] { return true; });  // one round: takes what was issued, advances every queue
  {
    std::lock_guard lock(mu_);
    driving_ = false;
    --pollers_;
  }
  role_free_.notify_all();
}

void P2pEngine::progress_loop() {
  std::unique_lock lock(mu_);
  int quiet_ticks = 0;
  while (!stopping_) {
    if (driving_ || waiters_.load() > 0 || leave_for_a_tick_) {
      leave_for_a_tick_ = false;
      cv_.wait_for(lock, kBackgroundTick, [&] { return stopping_; });
      continue;
    }
    if (pending_ == 0 && incoming_.empty()) {  // the role is free: nobody touches pending_
      if (quiet_ticks < kBackgroundQuietTicks) {
        ++quiet_ticks;
        cv_.wait_for(lock, kBackgroundTick, [&] { return stopping_; });
      } else {
        thread_asleep_ = true;
        cv_.wait(lock,
                 [&] { return stopping_ || !incoming_.empty() || (!driving_ && pending_ > 0); });
        thread_asleep_ = false;
      }
      continue;
    }
    quiet_ticks = 0;
    driving_ = true;
    lock.unlock();
    move_until(
        [&] { return stop_requested_.load(std::memory_order_relaxed) || waiters_.load() > 0; });
    lock.lock();
    driving_ = false;
    role_free_.notify_all();
  }
}

void P2pEngine::take_incoming() {
  std::lock_guard lock(mu_);
  take_incoming_locked();
}

void P2pEngine::take_incoming_locked() {
  for (Pending& p : incoming_) {
    const int peer = p.transfer.desc().peer;
    (p.transfer.desc().kind == coll::OpKind::send ? sends_ : recvs_)[peer].push_back(std::move(p));
    ++pending_;
  }
  incoming_.clear();
  has_incoming_.store(false, std::memory_order_relaxed);
}

bool P2pEngine::advance_all() {
  bool moved = false;
  for (auto* lanes : {&sends_, &recvs_}) {
    for (Lane& lane : *lanes) {
      while (!lane.empty()) {
        Pending& head = lane.front();
        const size_t before = head.transfer.chunks_moved();
        bool done = false;
        try {
          done = head.transfer.advance(fabric_, context(head));
        } catch (...) {
          // Its record says so before the communicator's failure dumps the records.
          recorder_.end(head.flight, std::current_exception());
          throw;
        }
        moved = moved || head.transfer.chunks_moved() != before;
        if (!done) break;
        complete(head, nullptr);
        lane.pop_front();
        --pending_;
      }
    }
  }
  return moved;
}

bool P2pEngine::any_ready() const {
  if (has_incoming_.load(std::memory_order_seq_cst) || has_failure_.load()) return true;
  for (const auto* lanes : {&sends_, &recvs_}) {
    for (const Lane& lane : *lanes) {
      if (!lane.empty() && lane.front().transfer.ready(fabric_)) return true;
    }
  }
  return false;
}

void P2pEngine::fail_pending(std::exception_ptr error) {
  for (auto* lanes : {&sends_, &recvs_}) {
    for (Lane& lane : *lanes) {
      for (Pending& p : lane) complete(p, error);
      lane.clear();
    }
  }
  pending_ = 0;
}

void P2pEngine::check_stalled() {
  if (has_failure_.load()) {
    std::exception_ptr error;
    {
      std::lock_guard lock(mu_);
      error = failure_;
    }
    return fail_pending(error);
  }
  const Clock::time_point now = Clock::now();
  for (auto* lanes : {&sends_, &recvs_}) {
    for (Lane& lane : *lanes) {
      if (lane.empty()) continue;
      const Pending& head = lane.front();
      // The failing transfer's record says so before the communicator's failure dumps it.
      try {
        fabric_.check_p2p_peer(head.transfer.desc().peer, context(head));
      } catch (const Error& e) {
        // A sender returns once its last chunk is staged and may exit or fail right after: what
        // it staged is still there to take. (Checked after its end was seen, so nothing is lost.)
        if (head.transfer.ready(fabric_)) continue;
        recorder_.end(head.flight, FlightState::failed, e.code());
        throw;
      }
      // Transfers behind the head have not started; the head is the one that is stuck.
      for (const Pending& p : lane) {
        if (now < p.deadline) continue;
        const bool send = p.transfer.desc().kind == coll::OpKind::send;
        recorder_.end(p.flight, FlightState::failed, ErrorCode::timeout);
        throw Error(ErrorCode::timeout,
                    label(p) + " timed out: " + fabric_.rank_name(head.transfer.desc().peer) +
                        (send ? " has not received " : " has not sent ") +
                        (&p == &head ? "it" : "the earlier " + label(head)) + " (" +
                        std::to_string(head.transfer.chunks_moved()) + " of " +
                        std::to_string(head.transfer.chunks()) + " chunks moved)" +
                        fabric_.stopped_note(std::array{head.transfer.desc().peer}));
      }
    }
  }
}

void P2pEngine::move_until(const std::function<bool()>& done, Clock::time_point until) {
  std::optional<transport::Backoff> backoff;  // from the first poll that moves nothing
  for (;;) {
    try {
      if (has_incoming_.load(std::memory_order_relaxed)) take_incoming();
      const bool moved = advance_all();
      if (done() || (pending_ == 0 && !has_incoming_.load(std::memory_order_seq_cst))) return;
      if (moved) {
        backoff.reset();
        continue;
      }
      if (!backoff) backoff.emplace(fabric_.oversubscribed());
      const transport::Backoff::Stage stage = backoff->next();
      if (stage == transport::Backoff::Stage::spin && !has_failure_.load()) continue;
      check_stalled();
      if (stage == transport::Backoff::Stage::sleep) {
        // done() too: a waiter that wants the role rings the same bell.
        fabric_.sleep_p2p([&] { return any_ready() || done(); }, until);
      }
    } catch (...) {
      // The first failure of a transfer breaks the whole communicator (later messages of the pair
      // would be out of step). The communicator keeps its first failure, which every pending and
      // later transfer then reports: the root cause, not a consequence of it.
      std::exception_ptr root = on_failure_(std::current_exception());
      fail_all(root);
      fail_pending(root);
    }
  }
}

}  // namespace tpf::detail
