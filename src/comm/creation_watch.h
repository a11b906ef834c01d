// The store a communicator's creation waits through. Its ranks wait on the store for each other's
// keys (hosts, settings, segments, network addresses); a rank whose creation fails gives its
// generation up (comm/name_generations.h) and publishes why on the generation's failure board
// (transport/failure_board.h). A rank still waiting in that generation used to wait out its own
// setup timeout (up to 120 s), fail with a timeout of its own, and meet the others only in a later
// generation. Through this store, a wait that has not ended within kLookEvery goes on in slices of
// that length, and between them (at most every kLookEvery, whatever the callers' own slices) the
// rank reads the board: a creation that failed on another rank ends this one at once, with that
// failure as its root cause (transport::RootCauseError), so every rank of it fails alike and all
// can try again together. A wait that ends within a slice costs nothing more; a longer one asks
// the store again each slice and reads the board once a second.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/forwarding_store.h"

namespace tpf::detail {

class CreationWatchStore : public bootstrap::ForwardingStore {
 public:
  // `generation_store`: the generation's own (prefixed) store, whose board it reads. `label`
  // ("communicator 'world'") begins the error of a creation another rank gave up.
  CreationWatchStore(std::shared_ptr<Store> generation_store, std::string label);

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                         const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) override;

  // The creation is over (the communicator is made): from here every call is passed on as it is
  // (the communicator's parts keep this store for their later reads).
  void creation_done() noexcept { watching_.store(false, std::memory_order_relaxed); }

  static constexpr std::chrono::milliseconds kLookEvery{1000};

 private:
  template <class Wait>
  auto sliced(std::chrono::milliseconds timeout, Wait&& wait) -> decltype(wait(timeout));
  // Throws the failure another rank published, looking at most every kLookEvery.
  void throw_if_given_up();

  std::string label_;
  std::atomic<bool> watching_{true};
  std::atomic<int64_t> next_look_{0};  // steady_clock ticks
};

}  // namespace tpf::detail
