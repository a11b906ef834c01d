#include "comm/creation_barrier.h"

#include <vector>

#include "tpf/error.h"
#include "transport/shm_fabric.h"

namespace tpf::detail {
namespace {

std::string made_key(int rank) { return "made/" + std::to_string(rank); }

}  // namespace

void await_every_rank_made(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                           const std::string& label, const transport::RankNames& names) {
  if (size == 1) return;
  if (rank != 0) {
    store.set(made_key(rank), "1");
    try {
      store.get("all_made", timeout);
    } catch (const transport::RootCauseError&) {
      throw;  // another rank's failure ended the creation
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) {
        throw Error(
            e.code(),
            label + ": waiting for rank 0 to see every rank finish creating it: " + e.what());
      }
      throw Error(ErrorCode::timeout,
                  label +
                      ": rank 0 did not see every rank finish creating the communicator within " +
                      std::to_string(timeout.count()) + " ms: " + e.what());
    }
    return;
  }
  std::vector<std::string> keys;
  for (int r = 1; r < size; ++r) keys.push_back(made_key(r));
  try {
    store.get_many(keys, timeout);
  } catch (const transport::RootCauseError&) {
    throw;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::timeout) {
      throw Error(e.code(), label + ": waiting for every rank to finish creating it: " + e.what());
    }
    std::vector<int> missing;
    for (int r = 1; r < size; ++r)
      if (!store.check(made_key(r))) missing.push_back(r);
    throw Error(ErrorCode::timeout, label + ": " + names.list(missing) +
                                        " did not finish creating the communicator within " +
                                        std::to_string(timeout.count()) + " ms: " + e.what());
  }
  store.set("all_made", "1");
}

}  // namespace tpf::detail
