// A Store that passes every call to another: the base of a view that changes some calls
// (AwaitedRanksStore) and of the tests' stores that fail or kill their process at one chosen call
// (override that call, call the base for the rest).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tpf/store.h"

namespace tpf::bootstrap {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& key, const std::string& value) override { inner_->set(key, value); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(key, timeout);
  }
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override {
    return inner_->get_many(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  bool check(const std::string& key) override { return inner_->check(key); }
  std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                         const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) override {
    return inner_->get_many_from(awaited_ranks, keys, timeout);
  }
  bool report_lost(int job_rank, const std::string& reason,
                   std::chrono::milliseconds timeout) override {
    return inner_->report_lost(job_rank, reason, timeout);
  }
  std::vector<int> dead_ranks() override { return inner_->dead_ranks(); }
  std::shared_ptr<void> keep_alive(std::chrono::milliseconds silence_limit) override {
    return inner_->keep_alive(silence_limit);
  }

 protected:
  // The store every call is passed to, for a view that reads it past its own changes.
  Store& inner() const { return *inner_; }

 private:
  std::shared_ptr<Store> inner_;
};

}  // namespace tpf::bootstrap
