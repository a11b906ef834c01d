// Whether every rank of a new communicator can open the descriptors the communicator holds for
// its peers (base/open_files.h). Each rank's open count and hard limit travel with its host key
// (comm/host_discovery.h), so every rank checks the same list and, where one rank's hard limit is
// too low, every rank fails alike naming it, before anything is connected (otherwise that rank's
// connects fail as "Destination is unreachable" while its peers wait out the setup timeout).
// Where only the soft limit is too low, each rank raises its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topo/hosts.h"

namespace tpf::detail {

// The descriptors one rank of a communicator may hold for it at once: a pidfd per other rank of
// its host (transport/peer_process.h), two sockets per rank on another host (UCX over TCP keeps
// one per pair, but both ends connect at once and hold two until they agree), and a fixed part
// for UCX's worker (epoll, event, timer and pipe descriptors, the listening socket).
uint64_t files_for_communicator(const topo::HostMap& hosts, int rank);

// `encoded_by_rank[r]`: rank r's base::encode_open_files line, as it joined. Throws
// Error(resource) naming the ranks whose hard limit cannot hold files_for_communicator beside
// what they had open; a line that does not parse (another tpfabric) is taken as unlimited.
void check_open_file_room(const std::vector<std::string>& encoded_by_rank,
                          const topo::HostMap& hosts, const std::string& label);

// Raises this rank's soft limit to hold files_for_communicator beside what is open, with
// kSpareFiles more for the program's own, as far as the hard limit allows.
void make_room_for_communicator(const topo::HostMap& hosts, int rank);

inline constexpr uint64_t kSpareFiles = 256;

}  // namespace tpf::detail
