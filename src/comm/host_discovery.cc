#include "comm/host_discovery.h"

#include <sstream>
#include <vector>

#include "tpf/error.h"
#include "transport/shm_layout.h"

namespace tpf::detail {
namespace {

using SetupClock = std::chrono::steady_clock;

std::chrono::milliseconds left_until(SetupClock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SetupClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace

topo::HostMap discover_hosts(Store& store, int rank, int size, const std::string& host_key,
                             std::chrono::milliseconds timeout, const std::string& label) {
  if (size == 1) return topo::HostMap({host_key});
  const auto deadline = SetupClock::now() + timeout;
  auto failed = [&](const Error& e, const std::string& waiting_for) {
    const std::string context = label + ": learning every rank's host (waiting for " + waiting_for +
                                ") failed: " + e.what();
    return Error(e.code(), context);
  };
  if (rank != 0) {
    store.set("host/" + std::to_string(rank), host_key);
    std::string list;
    try {
      list = store.get("hosts", left_until(deadline));
    } catch (const Error& e) {
      throw failed(e, "rank 0's list of hosts");
    }
    std::vector<std::string> keys;
    std::istringstream lines(list);
    for (std::string key; std::getline(lines, key);) keys.push_back(key);
    if (static_cast<int>(keys.size()) != size) {
      throw Error(ErrorCode::bootstrap, label + ": rank 0 listed the hosts of " +
                                            std::to_string(keys.size()) + " ranks, not " +
                                            std::to_string(size));
    }
    return topo::HostMap(std::move(keys));
  }
  std::vector<std::string> keys{host_key};
  for (int p = 1; p < size; ++p) {
    try {
      keys.push_back(store.get("host/" + std::to_string(p), left_until(deadline)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) throw failed(e, "rank " + std::to_string(p));
      std::vector<int> missing;
      for (int q = p; q < size; ++q)
        if (!store.check("host/" + std::to_string(q))) missing.push_back(q);
      throw Error(ErrorCode::timeout,
                  label + ": rank" + (missing.size() > 1 ? "s " : " ") +
                      transport::join_ranks(missing) + " did not join within " +
                      std::to_string(timeout.count()) +
                      " ms while creating the communicator (not started, or stuck before it)");
    }
  }
  std::string list;
  for (const std::string& key : keys) list += key + "\n";
  store.set("hosts", list);
  return topo::HostMap(std::move(keys));
}

}  // namespace tpf::detail
