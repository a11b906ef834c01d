#include "comm/net_p2p.h"

#include "tpf/error.h"

namespace tpf::detail {

NetP2p::NetP2p(transport::UcxNetwork& network, int comm_size, std::string comm_name,
               FailureSink on_failure)
    : network_(network),
      comm_name_(std::move(comm_name)),
      on_failure_(std::move(on_failure)),
      sent_(comm_size, 0),
      received_(comm_size, 0) {}

NetP2p::~NetP2p() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  fail_pending_locked(
      std::make_exception_ptr(Error(ErrorCode::aborted, "communicator '" + comm_name_ +
                                                            "' was destroyed before a send or "
                                                            "recv across hosts finished")));
}

std::string NetP2p::label(const coll::OpDesc& desc) const {
  return std::string(coll::op_kind_name(desc.kind)) +
         (desc.kind == coll::OpKind::send ? " to rank " : " from rank ") +
         std::to_string(desc.peer) + " on communicator '" + comm_name_ + "' (across hosts)";
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
  throw Error(ErrorCode::mismatch, label(desc) + ": rank " + std::to_string(desc.peer) + " sent " +
                                       dtype_name(sent) + " data where " + dtype_name(desc.dtype) +
                                       " was expected (" + std::to_string(done.bytes) +
                                       " bytes either way)");
}

void NetP2p::run(const coll::OpDesc& desc, Clock::time_point deadline) {
  transport::NetRequest request;
  {
    std::lock_guard lock(mu_);
    if (failure_) std::rethrow_exception(failure_);
    request = post_locked(desc);
  }
  const std::string what = label(desc);
  try {
    network_.wait_all(std::span<transport::NetRequest>(&request, 1),
                      transport::WaitContext::with_deadline(deadline, [&] { return what; }));
    check_dtype(desc, request);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    on_failure_(error);
    std::rethrow_exception(error);
  }
}

Work NetP2p::submit(const coll::OpDesc& desc, Clock::time_point deadline) {
  auto state = std::make_shared<WorkState>();
  state->deadline = deadline;
  std::unique_lock lock(mu_);
  if (failure_) {
    state->complete(failure_);
    return Work(state);
  }
  pending_.push_back({desc, post_locked(desc), state, deadline, label(desc)});
  if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
  lock.unlock();
  cv_.notify_all();
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
    p.state->complete(error);
  }
  pending_.clear();
}

void NetP2p::progress_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (pending_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      continue;
    }
    bool completed = false;
    for (auto it = pending_.begin(); it != pending_.end();) {
      const std::string& what = it->label;
      try {
        const auto ctx = transport::WaitContext::with_deadline(it->deadline, [&] { return what; });
        const auto progress =
            network_.advance(std::span<transport::NetRequest>(&it->request, 1), ctx);
        if (progress.done) {
          check_dtype(it->desc, it->request);
          it->state->complete(nullptr);
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
        const std::exception_ptr first = on_failure_(error);  // calls fail_all: takes mu_
        failed.state->complete(error);
        lock.lock();
        if (!failure_) failure_ = first;
        fail_pending_locked(failure_);
        break;
      }
    }
    if (!completed && !pending_.empty()) {
      lock.unlock();
      network_.wait_for_news(std::chrono::milliseconds(1));
      lock.lock();
    }
  }
}

}  // namespace tpf::detail
