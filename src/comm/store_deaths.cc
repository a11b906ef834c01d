#include "comm/store_deaths.h"

#include <vector>

#include "tpf/error.h"

namespace tpf::detail {

std::optional<std::string> StoreDeaths::dead(int job_rank) {
  const Clock::time_point now = Clock::now();
  if (now >= next_look_) {
    next_look_ = now + look_every_;
    try {
      for (int rank : store_.dead_ranks()) dead_.insert(rank);
    } catch (const Error&) {
      return std::nullopt;  // the store's own failure is for its next wait to report
    }
  }
  if (dead_.count(job_rank) == 0) return std::nullopt;
  // The store's words for it: a wait on this rank alone for a key nobody sets ends at once with
  // its account of the death.
  try {
    store_.get_many_from({job_rank}, {"store deaths: a key nobody sets"},
                         std::chrono::milliseconds(0));
  } catch (const Error& e) {
    if (e.code() == ErrorCode::peer_died) {
      // Without what the client adds of its wait (which store, which key): not this wait's.
      std::string said = e.what();
      if (const size_t wait = said.rfind(" (store at "); wait != std::string::npos)
        said.erase(wait);
      return said;
    }
  }
  return "job rank " + std::to_string(job_rank) + " is dead or lost, the job's store says";
}

}  // namespace tpf::detail
