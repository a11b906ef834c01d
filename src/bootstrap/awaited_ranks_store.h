// A view of the job's store for the waits of a communicator whose members are known by their job
// ranks (a split's): every read that waits asks for its keys with those ranks (get_many_from), so
// that a death or loss elsewhere in the job (which the store answers every other wait with) does
// not fail the communicator's setup. The rest passes through unchanged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap/forwarding_store.h"

namespace tpf::bootstrap {

class AwaitedRanksStore : public ForwardingStore {
 public:
  AwaitedRanksStore(std::shared_ptr<Store> inner, std::vector<int> job_ranks);
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;

 private:
  std::vector<int> job_ranks_;
};

}  // namespace tpf::bootstrap
