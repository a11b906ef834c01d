#include "bootstrap/awaited_ranks_store.h"

#include <utility>

#include "tpf/error.h"

namespace tpf::bootstrap {

AwaitedRanksStore::AwaitedRanksStore(std::shared_ptr<Store> inner, std::vector<int> job_ranks)
    : inner_(std::move(inner)), job_ranks_(std::move(job_ranks)) {
  if (!inner_) throw Error(ErrorCode::invalid_argument, "AwaitedRanksStore: inner store is null");
}

void AwaitedRanksStore::set(const std::string& key, const std::string& value) {
  inner_->set(key, value);
}

std::string AwaitedRanksStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get_many_from(job_ranks_, {key}, timeout).at(0);
}

int64_t AwaitedRanksStore::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);
}

bool AwaitedRanksStore::check(const std::string& key) { return inner_->check(key); }

std::vector<std::string> AwaitedRanksStore::get_many(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  return inner_->get_many_from(job_ranks_, keys, timeout);
}

std::vector<std::string> AwaitedRanksStore::get_many_from(const std::vector<int>& awaited_ranks,
                                                          const std::vector<std::string>& keys,
                                                          std::chrono::milliseconds timeout) {
  return inner_->get_many_from(awaited_ranks, keys, timeout);
}

bool AwaitedRanksStore::report_lost(int job_rank, const std::string& reason,
                                    std::chrono::milliseconds timeout) {
  return inner_->report_lost(job_rank, reason, timeout);
}

}  // namespace tpf::bootstrap
