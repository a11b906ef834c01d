// Stores inside the test's process, for code that talks to a store: one that keeps keys in memory
// (whose calls may wait until the test lets them through: a store that does not answer yet), and
// one that refuses every call, as a store whose server went away does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::testing {

// Keys in memory; `gated`: every call waits until open() (a store that does not answer yet).
class MemoryStore : public Store {
 public:
  explicit MemoryStore(bool gated = false) : open_(!gated) {}
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    opened_.notify_all();
  }
  void set(const std::string& key, const std::string& value) override {
    std::unique_lock lock = enter();
    values_[key] = value;
  }
  std::string get(const std::string& key, std::chrono::milliseconds) override {
    std::unique_lock lock = enter();
    const auto found = values_.find(key);
    if (found == values_.end()) throw Error(ErrorCode::timeout, "no key " + key);
    return found->second;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::unique_lock lock = enter();
    const int64_t now = (values_.count(key) ? std::stoll(values_[key]) : 0) + delta;
    values_[key] = std::to_string(now);
    return now;
  }
  bool check(const std::string& key) override {
    std::unique_lock lock = enter();
    return values_.count(key) != 0;
  }

 private:
  std::unique_lock<std::mutex> enter() {
    std::unique_lock lock(mu_);
    opened_.wait(lock, [this] { return open_; });
    return lock;
  }
  std::mutex mu_;
  std::condition_variable opened_;
  bool open_;
  std::map<std::string, std::string> values_;
};

// Every call fails, as a store whose server went away does.
class GoneStore : public Store {
 public:
  void set(const std::string&, const std::string&) override { fail(); }
  std::string get(const std::string&, std::chrono::milliseconds) override { fail(); }
  int64_t add(const std::string&, int64_t) override { fail(); }
  bool check(const std::string&) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw Error(ErrorCode::bootstrap, "the store is gone"); }
};

}  // namespace tpf::testing
