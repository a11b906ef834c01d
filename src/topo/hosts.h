// Which ranks share a host. A host here is what decides whether two processes can map each
// other's shared memory: ranks with one host key talk through shared-memory segments, ranks with
// different keys only through the network. Hosts are decided explicitly — each rank's key is
// exchanged through the store — never guessed from launcher variables (LOCAL_RANK & co.): one
// rank per network namespace on one machine is one rank per host.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tpf::topo {

// This process's host key: `node_id` (TPF_NODE_ID) when given; otherwise derived from what
// decides whether processes can share memory and reach each other by loopback: the boot (boot
// id), the network and IPC namespaces and the /dev/shm filesystem, with the hostname first so
// people can read it.
std::string local_host_key(const std::optional<std::string>& node_id);

// The machine's name as people know it (gethostname; "host" if it has none).
std::string hostname();

// This machine: one running kernel (its boot id), whatever the namespaces, containers or
// TPF_NODE_ID. Processes with the same key share the machine's cores, as the emulated hosts of
// scripts/emulated-hosts.sh do.
std::string local_machine_key();

// The layout of one communicator's ranks over hosts. Hosts are numbered by their lowest rank, and
// a host's ranks are in rank order: every rank derives the same map from the same keys.
class HostMap {
 public:
  HostMap() : HostMap(std::vector<std::string>{""}) {}
  // `devices_of_rank`: the network devices each rank was given (UCX_NET_DEVICES: a comma-separated
  // list, or "all"); empty = "all" for every rank. `machine_of_rank`: each rank's
  // local_machine_key(); empty = every host a machine of its own.
  explicit HostMap(std::vector<std::string> key_of_rank,
                   std::vector<std::string> devices_of_rank = {},
                   const std::vector<std::string>& machine_of_rank = {});

  int ranks() const noexcept { return static_cast<int>(host_of_.size()); }
  int hosts() const noexcept { return static_cast<int>(ranks_on_.size()); }
  bool single_host() const noexcept { return hosts() == 1; }
  int host_of(int rank) const { return host_of_.at(rank); }
  // The rank's index among its host's ranks; ranks with the same local rank form a rail.
  int local_rank(int rank) const { return local_rank_.at(rank); }
  const std::vector<int>& ranks_on(int host) const { return ranks_on_.at(host); }
  // `rank`'s rail without it: the ranks of the other hosts with its local rank, in host order (a
  // leader's: the other leaders). Hosts with fewer ranks have none on it.
  std::vector<int> rail_of(int rank) const;
  const std::string& key(int host) const { return key_of_host_.at(host); }
  // How many ranks run on `rank`'s machine, itself included, whichever host each is on: they
  // share its cores (the emulated hosts of one machine do; hosts of their own do not).
  int ranks_on_machine_of(int rank) const { return ranks_on_machine_of_.at(rank); }
  // Every host has the same number of ranks.
  bool uniform() const noexcept;
  // Each rail has network links of its own: every host has the same number (>= 2) of ranks, and
  // each rank was given its network devices by name, none of them given to another rank of its
  // host (as on a GPU server whose launcher gives each local rank the NIC next to its GPU). "all"
  // (UCX's default) or a list shared inside a host means the host's ranks share its links.
  bool rails_have_own_links() const noexcept { return rails_have_own_links_; }
  // "host 'a' (ranks 0, 1); host 'b' (ranks 2, 3)".
  std::string describe() const;

 private:
  std::vector<int> host_of_;
  std::vector<int> local_rank_;
  std::vector<std::vector<int>> ranks_on_;
  std::vector<std::string> key_of_host_;
  std::vector<int> ranks_on_machine_of_;
  bool rails_have_own_links_ = false;
};

}  // namespace tpf::topo
