#include "topo/hosts.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "tpf/error.h"

namespace tpf::topo {
namespace {

std::string namespace_id(const char* kind) {
  struct stat info {};
  const std::string path = std::string("/proc/self/ns/") + kind;
  if (::stat(path.c_str(), &info) != 0) return "?";  // no /proc: every process looks alike
  return std::to_string(info.st_ino);
}

// Which /dev/shm this process sees (its filesystem and directory): processes that see the same one
// can map each other's segments, whatever their mount namespaces (`ip netns exec` makes a new one
// per command, over the same /dev/shm); containers usually get one of their own.
std::string shm_id() {
  struct stat info {};
  if (::stat("/dev/shm", &info) != 0) return "?";
  return std::to_string(info.st_dev) + ":" + std::to_string(info.st_ino);
}

std::string full_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string boot_id() {
  const std::string id = full_boot_id();
  return id.empty() ? "?" : id.substr(0, 8);  // 32 bits tell boots apart well enough
}

// The devices of a UCX_NET_DEVICES list, or nullopt where it does not name them all ("all", a
// wildcard, an exclusion or an empty entry).
std::optional<std::vector<std::string>> named_devices(const std::string& list) {
  std::vector<std::string> devices;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string device = list.substr(start, comma - start);
    if (device.empty() || device == "all" || device.find_first_of("^*") != std::string::npos)
      return std::nullopt;
    devices.push_back(std::move(device));
    if (comma == list.size()) return devices;
    start = comma + 1;
  }
}

}  // namespace

std::string hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
  return name;
}

std::string local_host_key(const std::optional<std::string>& node_id) {
  if (node_id) return *node_id;
  return hostname() + "[boot " + boot_id() + ", net " + namespace_id("net") + ", ipc " +
         namespace_id("ipc") + ", shm " + shm_id() + "]";
}

std::string local_machine_key() {
  const std::string id = full_boot_id();
  return id.empty() ? hostname() : id;  // no /proc: the name is the best guess left
}

HostMap::HostMap(std::vector<std::string> key_of_rank, std::vector<std::string> devices_of_rank,
                 const std::vector<std::string>& machine_of_rank) {
  if (key_of_rank.empty()) throw Error(ErrorCode::internal, "a host map of no ranks");
  host_of_.resize(key_of_rank.size());
  local_rank_.resize(key_of_rank.size());
  for (size_t r = 0; r < key_of_rank.size(); ++r) {
    auto known = std::find(key_of_host_.begin(), key_of_host_.end(), key_of_rank[r]);
    const int host = static_cast<int>(known - key_of_host_.begin());
    if (known == key_of_host_.end()) {
      key_of_host_.push_back(key_of_rank[r]);
      ranks_on_.emplace_back();
    }
    host_of_[r] = host;
    local_rank_[r] = static_cast<int>(ranks_on_[host].size());
    ranks_on_[host].push_back(static_cast<int>(r));
  }
  ranks_on_machine_of_.resize(key_of_rank.size());
  const bool machines_known = machine_of_rank.size() == key_of_rank.size();
  std::map<std::string, int> ranks_on_machine;
  for (const std::string& machine : machine_of_rank) ++ranks_on_machine[machine];
  for (size_t r = 0; r < key_of_rank.size(); ++r) {
    ranks_on_machine_of_[r] = machines_known ? ranks_on_machine[machine_of_rank[r]]
                                             : static_cast<int>(ranks_on_[host_of_[r]].size());
  }
  if (devices_of_rank.size() != key_of_rank.size() || !uniform() || ranks_on_[0].size() < 2) return;
  for (const std::vector<int>& ranks : ranks_on_) {
    std::set<std::string> taken;
    for (int r : ranks) {
      const auto devices = named_devices(devices_of_rank[r]);
      if (!devices) return;
      for (const std::string& device : *devices)
        if (!taken.insert(device).second) return;
    }
  }
  rails_have_own_links_ = true;
}

bool HostMap::uniform() const noexcept {
  return std::all_of(ranks_on_.begin(), ranks_on_.end(),
                     [&](const std::vector<int>& r) { return r.size() == ranks_on_[0].size(); });
}

std::vector<int> HostMap::rail_of(int rank) const {
  const int local = local_rank(rank);
  std::vector<int> rail;
  for (int h = 0; h < hosts(); ++h) {
    if (h != host_of(rank) && local < static_cast<int>(ranks_on_[h].size()))
      rail.push_back(ranks_on_[h][local]);
  }
  return rail;
}

std::string HostMap::describe() const {
  std::string out;
  for (int h = 0; h < hosts(); ++h) {
    out += (h ? "; host '" : "host '") + key_of_host_[h] + "' (rank" +
           (ranks_on_[h].size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks_on_[h].size(); ++i)
      out += (i ? ", " : "") + std::to_string(ranks_on_[h][i]);
    out += ")";
  }
  return out;
}

}  // namespace tpf::topo
