// The one owner of tpfabric's settings: every TPF_* environment variable the project reads is
// listed in setting_catalog(), and the fabric's are parsed here only, once per communicator and
// strictly (a malformed value is an Error naming the variable). The communicator passes the
// result down (fabric config, algorithm tuning, flight recorder), so no layer below reads the
// environment, and a test can change a setting between two communicators of one process.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coll/algorithms.h"
#include "tpf/comm.h"
#include "transport/net_protocol.h"

namespace tpf::detail {

// One effective value and where it came from ("default", "TPF_TIMEOUT", "CommOptions::timeout",
// "hardware", ...), for `tpf settings`.
struct SettingReport {
  std::string name;
  std::string value;
  std::string source;
};

// Everything a communicator is configured by, resolved from its CommOptions and the environment.
struct CommSettings {
  std::chrono::milliseconds timeout{0};        // default deadline of each operation
  std::chrono::milliseconds setup_timeout{0};  // joining the store and mapping the peers
  size_t slot_bytes = 0;  // staging slot per rank (two each): whole cache lines, at least 4 KiB
  coll::CollectiveTuning tuning;
  bool asymmetric_fences = true;    // membarrier-based fences where the kernel has them
  std::string job_id;               // names this job's shared-memory segments
  size_t flight_recorder_size = 0;  // records kept per communicator; 0 = off
  int job_cpus = 1;                 // cores this job may use on this machine
  int local_world_size = 0;         // the launcher's ranks on this machine; 0 = no launcher
  std::string host_key;             // this rank's host (topo/hosts.h)
  // The network devices UCX uses here (UCX_NET_DEVICES), or, for TPF_RAIL_DEVICES=auto, the
  // request that the communicator resolves (topo::auto_rail_request).
  std::string net_devices;
  std::string net_transports;  // UCX transports between hosts (UCX_TLS syntax)
  transport::NetProtocol net_protocol = transport::NetProtocol::automatic;
  // TPF_NET_CONNECT=all: connect to every rank on another host while a communicator is made
  // (every pair checked up front), instead of to the first peers only (the others on first use).
  bool net_connect_all = false;
  // A rank on another host not heard from for this long is named lost (comm/heartbeat.h); a rank
  // on this host seen stopped for this long by one waiting on it, too (transport/stopped_peers.h).
  std::chrono::milliseconds host_lost_after{0};
  // A rank whose peer's connection failed waits this long for a notice that explains it
  // (transport::NetworkConfig::notice_wait).
  std::chrono::milliseconds net_notice_wait{0};
  std::vector<SettingReport> report;  // every value above with its source

  // The report of `name` (a TPF_* variable, or "local world size"), or nullptr.
  const SettingReport* reported(std::string_view name) const noexcept;

  // Ranks on this machine beyond its cores when a communicator of `comm_size` ranks runs here:
  // the all-reduce cost model charges each step for them.
  int excess_ranks(int comm_size) const noexcept;
};

// Reads the environment now. Options set in `options` win over the environment.
CommSettings resolve_comm_settings(const CommOptions& options = {});

// TPF_HOST_LOST_S, or its default, for a reader outside a communicator (`tpf run`, which finds a
// stopped rank lost when no rank is left to: cli/stopped_ranks.h). Throws Error naming the
// variable where it is malformed.
std::chrono::milliseconds host_lost_after_setting();

// Settings from which every rank derives the same choices on its own (algorithms, segment and
// chunk sizes): the network's must be alike on every rank of a communicator, shared memory's on
// every rank of a host. Ranks that differ would choose differently and send or expect messages
// the others do not, so a communicator compares them while it is created
// (comm/settings_agreement.h).
enum class SharedAmong { communicator, host };
struct SharedSetting {
  std::string name;   // the TPF_* variable
  std::string value;  // its effective value, as `tpf settings` prints it
  SharedAmong among;
};
std::vector<SharedSetting> shared_settings(const CommSettings& settings);

// Every TPF_* variable any part of tpfabric reads: its name, who reads it, what it sets.
struct SettingInfo {
  const char* name;
  const char* reader;  // "communicator", "process", "launcher (tpf run)", ...
  const char* meaning;
};
std::span<const SettingInfo> setting_catalog();

}  // namespace tpf::detail
