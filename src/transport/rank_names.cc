#include "transport/rank_names.h"

#include <algorithm>
#include <utility>

namespace tpf::transport {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

RankNames::RankNames(std::vector<int> job_ranks) : job_ranks_(std::move(job_ranks)) {}

int RankNames::job_rank(int rank) const {
  const bool known = rank >= 0 && static_cast<size_t>(rank) < job_ranks_.size();
  return known ? job_ranks_[rank] : rank;
}

std::string RankNames::operator()(int rank) const {
  std::string name = "rank " + std::to_string(rank);
  if (renumbered(rank)) name += " (job rank " + std::to_string(job_rank(rank)) + ")";
  return name;
}

std::string RankNames::with_host(int rank, std::string_view host) const {
  std::string name = "rank " + std::to_string(rank) + " (";
  if (renumbered(rank)) name += "job rank " + std::to_string(job_rank(rank)) + ", ";
  name += "host '";
  name += host;
  return name + "')";
}

std::string RankNames::list(const std::vector<int>& ranks) const {
  std::string names = (ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks);
  if (std::none_of(ranks.begin(), ranks.end(), [&](int r) { return renumbered(r); })) return names;
  std::vector<int> in_job;
  for (int r : ranks) in_job.push_back(job_rank(r));
  return names + (ranks.size() == 1 ? " (job rank " : " (job ranks ") + join_ranks(in_job) + ")";
}

}  // namespace tpf::transport
