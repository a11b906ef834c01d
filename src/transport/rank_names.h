// How a communicator's messages name its ranks: by the communicator's own number and, where that
// differs, by the rank's number in the job (the communicator made from the launcher's environment,
// which every split descends from), so that a user reading "rank 1 never arrived" in a
// tensor-parallel group need not map it back: "rank 1 (job rank 9) never arrived".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tpf::transport {

// "1, 3, 4": ranks as messages list them.
std::string join_ranks(const std::vector<int>& ranks);

class RankNames {
 public:
  // Ranks numbered as in the job.
  RankNames() = default;
  // `job_ranks[r]`: the job's number of the communicator's rank r (empty: the same numbers).
  explicit RankNames(std::vector<int> job_ranks);

  int job_rank(int rank) const;
  // "rank 1", or "rank 1 (job rank 9)".
  std::string operator()(int rank) const;
  // "rank 1 (host 'b')", or "rank 1 (job rank 9, host 'b')".
  std::string with_host(int rank, std::string_view host) const;
  // "rank 1" / "ranks 1, 3", with "(job rank(s) ...)" where they differ.
  std::string list(const std::vector<int>& ranks) const;

 private:
  bool renumbered(int rank) const { return job_rank(rank) != rank; }
  std::vector<int> job_ranks_;
};

}  // namespace tpf::transport
