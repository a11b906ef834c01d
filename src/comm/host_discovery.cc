#include "comm/host_discovery.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "topo/rail_devices.h"
#include "tpf/error.h"
#include "transport/rank_names.h"
#include "transport/shm_fabric.h"

namespace tpf::detail {
namespace {

using SetupClock = std::chrono::steady_clock;

std::chrono::milliseconds left_until(SetupClock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SetupClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

// A rank's entry in the store, one line: its host key (printable, no tabs: TPF_NODE_ID has no
// spaces, the derived key none but spaces), its devices, its machine key, its shared settings,
// its open files, its process token and its pid, tab-separated (control characters and spaces in
// the devices and machine key made '?'; the settings' and open files' lines have no tab).
std::string entry_of(const JoiningRank& rank, std::string machine) {
  std::string devices = rank.net_devices;
  for (std::string* field : {&devices, &machine}) {
    for (char& c : *field)
      if (static_cast<unsigned char>(c) <= ' ') c = '?';
  }
  return rank.host_key + "\t" + devices + "\t" + machine + "\t" + rank.shared_settings + "\t" +
         rank.open_files + "\t" + std::to_string(rank.process) + "\t" + std::to_string(rank.pid);
}

// What the entries of every rank, in rank order, say.
DiscoveredRanks discovered_from(const std::vector<std::string>& entries) {
  std::vector<std::string> keys, devices, machines, settings, open_files;
  std::vector<uint64_t> processes;
  std::vector<int64_t> pids;
  for (const std::string& entry : entries) {
    std::vector<std::string> fields;
    std::istringstream parts(entry);
    for (std::string field; std::getline(parts, field, '\t');) fields.push_back(field);
    fields.resize(7);
    keys.push_back(fields[0]);
    devices.push_back(fields[1].empty() ? "all" : fields[1]);
    machines.push_back(fields[2].empty() ? fields[0] : fields[2]);
    settings.push_back(fields[3]);
    open_files.push_back(fields[4]);
    uint64_t process = 0;  // 0, no process's token, where the field is not a number
    std::from_chars(fields[5].data(), fields[5].data() + fields[5].size(), process);
    processes.push_back(process);
    int64_t pid = 0;
    std::from_chars(fields[6].data(), fields[6].data() + fields[6].size(), pid);
    pids.push_back(pid);
  }
  topo::resolve_auto_rail_requests(keys, devices);
  topo::HostMap hosts(keys, devices, machines);
  return {std::move(hosts),      std::move(devices),   std::move(settings),
          std::move(open_files), std::move(processes), std::move(pids)};
}

}  // namespace

DiscoveredRanks discover_hosts(Store& store, int rank, int size, const JoiningRank& joining,
                               std::chrono::milliseconds timeout, const std::string& label) {
  if (size == 1) {
    std::vector<std::string> devices{joining.net_devices};
    topo::resolve_auto_rail_requests({joining.host_key}, devices);
    return {topo::HostMap({joining.host_key}),
            std::move(devices),
            {joining.shared_settings},
            {joining.open_files},
            {joining.process},
            {joining.pid}};
  }
  const std::string mine = entry_of(joining, topo::local_machine_key());
  const auto deadline = SetupClock::now() + timeout;
  auto failed = [&](const Error& e, const std::string& waiting_for) {
    const std::string context = label + ": learning every rank's host (waiting for " + waiting_for +
                                ") failed: " + e.what();
    return Error(e.code(), context);
  };
  if (rank != 0) {
    store.set("host/" + std::to_string(rank), mine);
    std::string list;
    try {
      list = store.get("hosts", left_until(deadline));
    } catch (const transport::RootCauseError&) {
      throw;  // another rank's failure ended the creation (comm/creation_watch.h)
    } catch (const Error& e) {
      throw failed(e, "rank 0's list of hosts");
    }
    std::vector<std::string> entries;
    std::istringstream lines(list);
    for (std::string entry; std::getline(lines, entry);) entries.push_back(entry);
    if (static_cast<int>(entries.size()) != size) {
      throw Error(ErrorCode::bootstrap, label + ": rank 0 listed the hosts of " +
                                            std::to_string(entries.size()) + " ranks, not " +
                                            std::to_string(size));
    }
    return discovered_from(entries);
  }
  std::vector<std::string> keys;  // every other rank's entry, in one request to the store
  for (int p = 1; p < size; ++p) keys.push_back("host/" + std::to_string(p));
  std::vector<std::string> entries{mine};
  try {
    for (std::string& entry : store.get_many(keys, left_until(deadline)))
      entries.push_back(std::move(entry));
  } catch (const transport::RootCauseError&) {
    throw;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::timeout) throw failed(e, "the other ranks' entries");
    std::vector<int> missing;
    for (int q = 1; q < size; ++q)
      if (!store.check("host/" + std::to_string(q))) missing.push_back(q);
    throw Error(ErrorCode::timeout,
                label + ": rank" + (missing.size() > 1 ? "s " : " ") +
                    transport::join_ranks(missing) + " did not join within " +
                    std::to_string(timeout.count()) +
                    " ms while creating the communicator (not started, or stuck before it)");
  }
  std::string list;
  for (const std::string& entry : entries) list += entry + "\n";
  store.set("hosts", list);
  return discovered_from(entries);
}

}  // namespace tpf::detail
