#include "bootstrap/awaited_ranks_store.h"

#include <utility>

namespace tpf::bootstrap {

AwaitedRanksStore::AwaitedRanksStore(std::shared_ptr<Store> inner, std::vector<int> job_ranks)
    : ForwardingStore(std::move(inner)), job_ranks_(std::move(job_ranks)) {}

std::string AwaitedRanksStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return get_many_from(job_ranks_, {key}, timeout).at(0);
}

std::vector<std::string> AwaitedRanksStore::get_many(const std::vector<std::string>& keys,
                                                     std::chrono::milliseconds timeout) {
  return get_many_from(job_ranks_, keys, timeout);
}

}  // namespace tpf::bootstrap
