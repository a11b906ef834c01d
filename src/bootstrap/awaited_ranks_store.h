// A view of the job's store for the waits of a communicator whose members are known by their job
// ranks (a split's): every read that waits asks for its keys with those ranks (get_many_from), so
// that a death or loss elsewhere in the job (which the store answers every other wait with) does
// not fail the communicator's setup. The rest passes through unchanged.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tpf/store.h"

namespace tpf::bootstrap {

class AwaitedRanksStore : public Store {
 public:
  AwaitedRanksStore(std::shared_ptr<Store> inner, std::vector<int> job_ranks);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                         const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) override;
  bool report_lost(int job_rank, const std::string& reason,
                   std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<Store> inner_;
  std::vector<int> job_ranks_;
};

}  // namespace tpf::bootstrap
