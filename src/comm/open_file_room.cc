#include "comm/open_file_room.h"

#include "base/open_files.h"
#include "tpf/error.h"
#include "transport/rank_names.h"

namespace tpf::detail {
namespace {

// UCX's worker measured 14 (3 epoll, an event and a timer descriptor, 7 pipes, the listening
// socket, one more); the rest is margin for the store's connections.
constexpr uint64_t kFilesPerNetwork = 32;
constexpr uint64_t kSocketsPerRemoteRank = 2;

}  // namespace

uint64_t files_for_communicator(const topo::HostMap& hosts, int rank) {
  const uint64_t on_host = hosts.ranks_on(hosts.host_of(rank)).size();
  const uint64_t elsewhere = static_cast<uint64_t>(hosts.ranks()) - on_host;
  uint64_t files = on_host - 1;
  if (elsewhere > 0) files += kFilesPerNetwork + kSocketsPerRemoteRank * elsewhere;
  return files;
}

void check_open_file_room(const std::vector<std::string>& encoded_by_rank,
                          const topo::HostMap& hosts, const std::string& label) {
  std::vector<int> short_of_room;
  std::string first;  // the first such rank's numbers
  for (int r = 0; r < static_cast<int>(encoded_by_rank.size()); ++r) {
    const std::optional<base::OpenFiles> files = base::decode_open_files(encoded_by_rank[r]);
    const uint64_t needed = files_for_communicator(hosts, r);
    if (!files || files->room() >= needed) continue;
    if (short_of_room.empty()) {
      const int on_host = static_cast<int>(hosts.ranks_on(hosts.host_of(r)).size());
      first = "rank " + std::to_string(r) + " on host '" + hosts.key(hosts.host_of(r)) +
              "' has a hard limit of " + std::to_string(files->hard) + " with " +
              std::to_string(files->open) + " open and needs up to " + std::to_string(needed) +
              " more, for " + std::to_string(hosts.ranks() - on_host) +
              " ranks on other hosts and " + std::to_string(on_host - 1) + " on its own";
    }
    short_of_room.push_back(r);
  }
  if (short_of_room.empty()) return;
  throw Error(
      ErrorCode::resource,
      label + ": rank" + (short_of_room.size() > 1 ? "s " : " ") +
          transport::join_ranks(short_of_room) +
          (short_of_room.size() > 1 ? " cannot open a descriptor for each of their peers ("
                                    : " cannot open a descriptor for each of its peers (") +
          first +
          "): raise the hard open-file limit (ulimit -Hn, as root; LimitNOFILE= for a systemd "
          "service; --ulimit nofile= for a container)");
}

void make_room_for_communicator(const topo::HostMap& hosts, int rank) {
  base::make_room_for_files(files_for_communicator(hosts, rank), kSpareFiles);
}

}  // namespace tpf::detail
