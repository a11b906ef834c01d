#include "transport/failure_board.h"

#include <charconv>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace tpf::transport {
namespace {

// Under the communicator's prefix: who came first, then what they published.
constexpr const char* kClaimKey = "failure/claims";
constexpr const char* kRecordKey = "failure/record";

}  // namespace

struct FailureBoard::State {
  std::shared_ptr<Store> store;
  std::mutex mu;
  std::condition_variable changed;
  bool publishing = false;  // a publication started
  bool published = false;   // and reached the store (or failed: nothing more to wait for)
  bool reading = false;     // the reader started
  bool stop = false;        // the board is gone: the reader stops
  std::optional<FailureRecord> found;
};

std::string encode_failure_record(const FailureRecord& record) {
  std::string head = std::to_string(static_cast<int>(record.code));
  if (record.lost_process != 0) {
    head += ' ';  // appended piece by piece: GCC 12 gives a false -Wrestrict for " " + to_string
    head += std::to_string(record.lost_process);
  }
  return head + "\n" + record.message;
}

std::optional<FailureRecord> decode_failure_record(const std::string& text) {
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  const char* const head_end = text.data() + newline;
  unsigned code = 0;
  std::from_chars_result read = std::from_chars(text.data(), head_end, code);
  if (read.ec != std::errc() || code > static_cast<unsigned>(ErrorCode::internal))
    return std::nullopt;
  uint64_t lost = 0;
  if (read.ptr != head_end && *read.ptr == ' ') {
    read = std::from_chars(read.ptr + 1, head_end, lost);
    if (read.ec != std::errc() || lost == 0) return std::nullopt;
  }
  if (read.ptr != head_end) return std::nullopt;
  return FailureRecord{static_cast<ErrorCode>(code), text.substr(newline + 1), lost};
}

std::optional<FailureRecord> read_published_failure(Store& store) {
  if (!store.check(kRecordKey)) return std::nullopt;
  return decode_failure_record(store.get(kRecordKey, std::chrono::milliseconds(0)));
}

FailureBoard::FailureBoard(std::shared_ptr<Store> store) : state_(std::make_shared<State>()) {
  state_->store = std::move(store);
}

FailureBoard::~FailureBoard() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->changed.notify_all();
}

void FailureBoard::publish(const FailureRecord& record) {
  {
    std::lock_guard lock(state_->mu);
    if (!state_->store || state_->publishing) return;
    state_->publishing = true;
  }
  auto publish_once = [state = state_, text = encode_failure_record(record)] {
    try {
      if (state->store->add(kClaimKey, 1) == 1) state->store->set(kRecordKey, text);
    } catch (...) {  // the store is gone or refused: the notices over the network remain
    }
    {
      std::lock_guard lock(state->mu);
      state->published = true;
    }
    state->changed.notify_all();
  };
  try {
    std::thread(std::move(publish_once)).detach();
  } catch (const std::system_error&) {  // no thread to be had: nothing published, nothing awaited
    std::lock_guard lock(state_->mu);
    state_->published = true;
  }
}

bool FailureBoard::await_published(std::chrono::milliseconds limit) {
  std::unique_lock lock(state_->mu);
  return state_->changed.wait_for(lock, limit,
                                  [&] { return !state_->publishing || state_->published; });
}

std::optional<FailureRecord> FailureBoard::published() {
  std::lock_guard lock(state_->mu);
  if (state_->found || state_->reading || !state_->store) return state_->found;
  state_->reading = true;
  auto read_until_found = [state = state_] {
    std::unique_lock lock(state->mu);
    while (!state->stop) {
      lock.unlock();
      std::optional<FailureRecord> record;
      try {
        if (state->store->check(kRecordKey)) {
          record = read_published_failure(*state->store);
          if (!record) return;  // not ours: nothing to learn here
        }
      } catch (...) {
        return;  // the store is gone: the notices over the network remain
      }
      lock.lock();
      if (record) {
        state->found = std::move(record);
        return;
      }
      state->changed.wait_for(lock, kLookEvery, [&] { return state->stop; });
    }
  };
  try {
    std::thread(std::move(read_until_found)).detach();
  } catch (const std::system_error&) {
    state_->reading = false;  // the next call tries again
  }
  return std::nullopt;
}

}  // namespace tpf::transport
