// Learns which host every rank of a new communicator is on, through its store: each rank
// publishes its host key, the network devices it was given (UCX_NET_DEVICES, or those nearest
// to it for TPF_RAIL_DEVICES=auto) and its shared
// settings (comm/settings_agreement.h), rank 0 collects them in rank order and publishes the
// list, and every rank builds its HostMap from that one list (so all ranks agree even if a key
// were to change).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "topo/hosts.h"
#include "tpf/store.h"

namespace tpf::detail {

struct DiscoveredRanks {
  topo::HostMap hosts;
  // Per rank: the network devices it uses, its requests for devices chosen by topology resolved
  // (topo::resolve_auto_rail_requests).
  std::vector<std::string> devices;
  std::vector<std::string> shared_settings;  // per rank: encode_shared_settings' line
};

// `store` is the communicator's own (prefixed) store; `label` names the communicator in errors.
// Bounded by `timeout`: a rank that does not publish its key is named.
DiscoveredRanks discover_hosts(Store& store, int rank, int size, const std::string& host_key,
                               const std::string& net_devices, const std::string& shared_settings,
                               std::chrono::milliseconds timeout, const std::string& label);

}  // namespace tpf::detail
