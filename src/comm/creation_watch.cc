#include "comm/creation_watch.h"

#include <algorithm>
#include <utility>

#include "tpf/error.h"
#include "transport/failure_board.h"

namespace tpf::detail {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

CreationWatchStore::CreationWatchStore(std::shared_ptr<Store> generation_store, std::string label)
    : ForwardingStore(std::move(generation_store)), label_(std::move(label)) {}

template <class Wait>
auto CreationWatchStore::sliced(std::chrono::milliseconds timeout, Wait&& wait)
    -> decltype(wait(timeout)) {
  if (!watching_.load(std::memory_order_relaxed)) return wait(timeout);
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::clamp(left, std::chrono::milliseconds(0), kLookEvery);
    try {
      return wait(slice);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) throw;
      throw_if_given_up();
      if (Clock::now() < deadline) continue;
      if (slice == timeout) throw;  // one slice was the whole wait: its error says it
      throw Error(ErrorCode::timeout, std::string(e.what()) + " (the last slice of a wait of " +
                                          std::to_string(timeout.count()) + " ms)");
    }
  }
}

void CreationWatchStore::throw_if_given_up() {
  const int64_t now = Clock::now().time_since_epoch().count();
  if (now < next_look_.load(std::memory_order_relaxed)) return;
  next_look_.store(now + Clock::duration(kLookEvery).count(), std::memory_order_relaxed);
  std::optional<transport::FailureRecord> given_up;
  try {
    given_up = transport::read_published_failure(inner());
  } catch (const Error&) {
    return;  // the wait's own error says what the store did
  }
  if (given_up) {
    throw transport::RootCauseError(
        label_ + ": another rank's creation of it failed and gave it up", std::move(*given_up));
  }
}

std::string CreationWatchStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return sliced(timeout,
                [&](std::chrono::milliseconds slice) { return ForwardingStore::get(key, slice); });
}

std::vector<std::string> CreationWatchStore::get_many(const std::vector<std::string>& keys,
                                                      std::chrono::milliseconds timeout) {
  return sliced(timeout, [&](std::chrono::milliseconds slice) {
    return ForwardingStore::get_many(keys, slice);
  });
}

std::vector<std::string> CreationWatchStore::get_many_from(const std::vector<int>& awaited_ranks,
                                                           const std::vector<std::string>& keys,
                                                           std::chrono::milliseconds timeout) {
  return sliced(timeout, [&](std::chrono::milliseconds slice) {
    return ForwardingStore::get_many_from(awaited_ranks, keys, slice);
  });
}

}  // namespace tpf::detail
