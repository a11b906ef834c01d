// PrefixStore: a namespaced view of another store, so that sub-communicators can share one
// connection without their keys colliding. Also Store's defaults: get_many (a get per key),
// get_many_from, report_lost, dead_ranks and keep_alive (a store that cannot tell its waiters).

#include <algorithm>
#include <utility>

#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) {
    throw Error(ErrorCode::invalid_argument,
                "PrefixStore: inner store is null (prefix '" + prefix_ + "')");
  }
  prefix_ += '/';
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  inner_->set(prefix_ + key, value);
}

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get(prefix_ + key, timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(prefix_ + key, delta);
}

bool PrefixStore::check(const std::string& key) { return inner_->check(prefix_ + key); }

std::vector<std::string> PrefixStore::prefixed(const std::vector<std::string>& keys) const {
  std::vector<std::string> inner_keys;
  inner_keys.reserve(keys.size());
  for (const std::string& key : keys) inner_keys.push_back(prefix_ + key);
  return inner_keys;
}

std::vector<std::string> PrefixStore::get_many(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  return inner_->get_many(prefixed(keys), timeout);
}

std::vector<std::string> PrefixStore::get_many_from(const std::vector<int>& awaited_ranks,
                                                    const std::vector<std::string>& keys,
                                                    std::chrono::milliseconds timeout) {
  return inner_->get_many_from(awaited_ranks, prefixed(keys), timeout);
}

bool PrefixStore::report_lost(int job_rank, const std::string& reason,
                              std::chrono::milliseconds timeout) {
  return inner_->report_lost(job_rank, reason, timeout);  // ranks are the job's: no prefix
}

std::vector<int> PrefixStore::dead_ranks() { return inner_->dead_ranks(); }  // the job's

bool Store::report_lost(int, const std::string&, std::chrono::milliseconds) { return false; }

std::vector<int> Store::dead_ranks() { return {}; }

std::shared_ptr<void> PrefixStore::keep_alive(std::chrono::milliseconds silence_limit) {
  return inner_->keep_alive(silence_limit);  // the process's, whatever the prefix
}

std::shared_ptr<void> Store::keep_alive(std::chrono::milliseconds) { return nullptr; }

std::vector<std::string> Store::get_many_from(const std::vector<int>&,
                                              const std::vector<std::string>& keys,
                                              std::chrono::milliseconds timeout) {
  return get_many(keys, timeout);
}

std::vector<std::string> Store::get_many(const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    values.push_back(get(key, std::max(left, std::chrono::milliseconds(0))));
  }
  return values;
}

}  // namespace tpf
