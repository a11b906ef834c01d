#include "comm/host_discovery.h"

#include <charconv>
#include <functional>
#include <sstream>
#include <vector>

#include "comm/creation_watch.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"
#include "transport/peer_process.h"
#include "transport/rank_names.h"
#include "transport/shm_fabric.h"
#include "transport/stopped_peers.h"

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

// What one rank's entry says (entry_of's fields; a missing one reads as empty).
struct Entry {
  std::string host_key, devices, machine, settings, open_files;
  uint64_t process = 0;  // 0, no process's token, where the field is not a number
  int64_t pid = 0;
};

Entry parse_entry(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream parts(line);
  for (std::string field; std::getline(parts, field, '\t');) fields.push_back(field);
  fields.resize(7);
  Entry entry{fields[0], fields[1].empty() ? "all" : fields[1],
              fields[2].empty() ? fields[0] : fields[2], fields[3], fields[4]};
  std::from_chars(fields[5].data(), fields[5].data() + fields[5].size(), entry.process);
  std::from_chars(fields[6].data(), fields[6].data() + fields[6].size(), entry.pid);
  return entry;
}

// What the entries of every rank, in rank order, say.
DiscoveredRanks discovered_from(const std::vector<std::string>& lines) {
  std::vector<std::string> keys, devices, machines, settings, open_files;
  std::vector<uint64_t> processes;
  std::vector<int64_t> pids;
  for (const std::string& line : lines) {
    Entry entry = parse_entry(line);
    keys.push_back(std::move(entry.host_key));
    devices.push_back(std::move(entry.devices));
    machines.push_back(std::move(entry.machine));
    settings.push_back(std::move(entry.settings));
    open_files.push_back(std::move(entry.open_files));
    processes.push_back(entry.process);
    pids.push_back(entry.pid);
  }
  topo::resolve_auto_rail_requests(keys, devices);
  topo::HostMap hosts(keys, devices, machines);
  return {std::move(hosts),      std::move(devices),   std::move(settings),
          std::move(open_files), std::move(processes), std::move(pids)};
}

// A rank's wait for rank 0's list of hosts, in slices. Between them it reads rank 0's own entry
// (published first) until it has it; where that says rank 0 is on this rank's host (its pid means
// the same process here, as for the shared-memory fabric's peers), it looks at rank 0's process:
// one that has exited, or that it has seen stopped for stopped_lost_after, ends the wait naming
// it. Before 2026-12-07 a stopped rank 0 held every other rank until the setup's deadline (up to
// 120 s). A rank 0 on another host is the store's to find (comm/store_deaths.h): its wait for
// the list then ends with the store's peer_died.
class HostListWait {
 public:
  HostListWait(Store& store, std::string host_key, const DiscoveryContext& context)
      : store_(store),
        host_key_(std::move(host_key)),
        context_(context),
        watch_(1, context.stopped_lost_after) {}

  // The list. The store's errors (a timeout once `deadline` has passed) are thrown as
  // `store_failed` makes them, but a failure of another rank's creation as it is
  // (comm/creation_watch.h).
  std::string list(SetupClock::time_point deadline,
                   const std::function<Error(const Error&)>& store_failed) {
    for (;;) {
      const std::chrono::milliseconds slice = next_slice(deadline);
      try {
        return store_.get("hosts", slice);
      } catch (const transport::RootCauseError&) {
        throw;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::timeout) throw store_failed(e);
        if (SetupClock::now() >= deadline) {
          if (slice == context_.timeout) throw store_failed(e);  // one slice was the whole wait
          throw store_failed(
              Error(ErrorCode::timeout, std::string(e.what()) + " (the last slice of a wait of " +
                                            std::to_string(context_.timeout.count()) + " ms)"));
        }
      }
      learn_rank_0();
      look_at_rank_0();
    }
  }

 private:
  // A look at rank 0 is due every slice; with none to make, slices are the creation watch's
  // (CreationWatchStore::kLookEvery), which then passes each on whole.
  std::chrono::milliseconds next_slice(SetupClock::time_point deadline) const {
    const bool looking = rank_0_.pid() > 0 || !learned_;
    const std::chrono::milliseconds every =
        looking && context_.stopped_lost_after.count() > 0
            ? transport::StoppedPeers::look_every(context_.stopped_lost_after)
            : CreationWatchStore::kLookEvery;
    return std::min(left_until(deadline), every);
  }

  void learn_rank_0() {
    if (learned_) return;
    Entry entry;
    try {
      entry = parse_entry(store_.get("host/0", std::chrono::milliseconds(0)));
    } catch (const transport::RootCauseError&) {
      throw;  // another rank's creation failed: the creation watch looked between the slices
    } catch (const Error&) {
      return;  // not published yet; the wait for the list says what the store says
    }
    learned_ = true;
    if (entry.host_key != host_key_ || entry.pid <= 0) return;
    rank_0_ = transport::PeerProcess(static_cast<pid_t>(entry.pid));
    rank_0_process_ = entry.process;
  }

  void look_at_rank_0() const {
    if (rank_0_.pid() <= 0) return;
    const std::string rank_0 = context_.names(0);
    if (!rank_0_.alive()) {
      throw Error(ErrorCode::peer_died,
                  context_.label + ": " +
                      transport::died_while_creating_text(rank_0, rank_0_.pid(),
                                                          "waiting for its list of hosts"));
    }
    if (const auto lost = watch_.lost_for(0, rank_0_)) {
      throw transport::ProcessLostError(
          ErrorCode::timeout,
          context_.label + " (creating the communicator, waiting for rank 0's list of hosts): " +
              transport::stopped_lost_text(rank_0, rank_0_.pid(), *lost, watch_.lost_after()),
          rank_0_process_, /*rank=*/0);
    }
  }

  Store& store_;
  std::string host_key_;
  const DiscoveryContext& context_;
  const transport::StoppedPeers watch_;
  bool learned_ = false;  // rank 0's entry has been read
  transport::PeerProcess rank_0_;
  uint64_t rank_0_process_ = 0;
};

}  // namespace

DiscoveredRanks discover_hosts(Store& store, int rank, int size, const JoiningRank& joining,
                               const DiscoveryContext& context) {
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
  const std::string& label = context.label;
  const auto deadline = SetupClock::now() + context.timeout;
  auto failed = [&](const Error& e, const std::string& waiting_for) {
    const std::string what = label + ": learning every rank's host (waiting for " + waiting_for +
                             ") failed: " + e.what();
    return Error(e.code(), what);
  };
  store.set("host/" + std::to_string(rank), mine);
  if (rank != 0) {
    const std::string list =
        HostListWait(store, joining.host_key, context).list(deadline, [&](const Error& e) {
          return failed(e, "rank 0's list of hosts");
        });
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
                label + ": " + context.names.list(missing) + " did not join within " +
                    std::to_string(context.timeout.count()) +
                    " ms while creating the communicator (not started, or stuck before it)");
  }
  std::string list;
  for (const std::string& entry : entries) list += entry + "\n";
  store.set("hosts", list);
  return discovered_from(entries);
}

}  // namespace tpf::detail
