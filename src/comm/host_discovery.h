// Learns which host every rank of a new communicator is on, through its store: each rank
// publishes its host key, the network devices it was given (UCX_NET_DEVICES, or those nearest
// to it for TPF_RAIL_DEVICES=auto), its shared settings (comm/settings_agreement.h) and its
// open-file limit (comm/open_file_room.h) and its process (token and pid), rank 0 collects them in
// rank order and publishes the list, and every rank builds its HostMap from that one list (so all
// ranks agree even if a key were to change). Rank 0 publishes its own entry first, so that a rank
// waiting for the list on rank 0's host can look at rank 0's process meanwhile.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "topo/hosts.h"
#include "tpf/store.h"
#include "transport/rank_names.h"

namespace tpf::detail {

// What a rank tells the others as it joins.
struct JoiningRank {
  std::string host_key;
  std::string net_devices;
  std::string shared_settings;  // encode_shared_settings' line
  std::string open_files;       // base::encode_open_files' line
  uint64_t process = 0;         // base::this_process_token
  int64_t pid = 0;              // its pid (in its host's pid namespace), for messages
};

struct DiscoveredRanks {
  topo::HostMap hosts;
  // Per rank: the network devices it uses, its requests for devices chosen by topology resolved
  // (topo::resolve_auto_rail_requests).
  std::vector<std::string> devices;
  std::vector<std::string> shared_settings;  // per rank: encode_shared_settings' line
  std::vector<std::string> open_files;       // per rank: base::encode_open_files' line
  std::vector<uint64_t> processes;           // per rank: its process's token
  std::vector<int64_t> pids;                 // per rank: its pid, 0 where not told
};

// How a discovery waits, and how its errors name what it waited for.
struct DiscoveryContext {
  std::chrono::milliseconds timeout{0};  // a rank that does not publish its entry is named
  std::string label;                     // the communicator, "communicator 'x'"
  transport::RankNames names;            // its ranks, with their job ranks
  // A rank waiting for rank 0's list of hosts finds rank 0 lost once it has seen it stopped this
  // long (TPF_HOST_LOST_S; zero: never), where rank 0 is on its host.
  std::chrono::milliseconds stopped_lost_after{0};
};

// `store` is the communicator's own (prefixed) store. Bounded by `context.timeout`.
DiscoveredRanks discover_hosts(Store& store, int rank, int size, const JoiningRank& mine,
                               const DiscoveryContext& context);

}  // namespace tpf::detail
