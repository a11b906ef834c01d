#include "topo/rail_devices.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "tpf/error.h"

namespace tpf::topo {

std::vector<std::string> parse_rail_devices(const std::string& text, const std::string& what) {
  std::vector<std::string> devices;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    std::string device = text.substr(begin, end - begin);
    if (device.empty() || device.find_first_of(" \t\n=") != std::string::npos) {
      throw Error(ErrorCode::invalid_argument,
                  what + ": '" + device + "' in '" + text +
                      "' is not a device name (DEVICE,DEVICE,...: one UCX device per local rank, "
                      "e.g. mlx5_0:1,mlx5_1:1)");
    }
    devices.push_back(std::move(device));
    begin = end + 1;
  }
  if (devices.size() > 1 && std::count(devices.begin(), devices.end(), kAutoRailDevices) > 0) {
    throw Error(ErrorCode::invalid_argument,
                what + ": '" + text +
                    "' mixes auto with device names (auto alone: each rank a device next to "
                    "its cores)");
  }
  return devices;
}

const std::string& rail_device(const std::vector<std::string>& devices, int local_rank) {
  if (devices.empty() || local_rank < 0) {
    throw Error(ErrorCode::internal, "no rail device for local rank " + std::to_string(local_rank) +
                                         " among " + std::to_string(devices.size()));
  }
  return devices[static_cast<size_t>(local_rank) % devices.size()];
}

namespace {
constexpr std::string_view kRequestPrefix = "auto:";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = std::min(text.find(separator, begin), text.size());
    if (end > begin) items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}
}  // namespace

bool is_auto(const std::vector<std::string>& devices) {
  return devices.size() == 1 && devices[0] == kAutoRailDevices;
}

std::string auto_rail_request(const std::vector<std::string>& nearest) {
  std::string request(kRequestPrefix);
  for (size_t i = 0; i < nearest.size(); ++i) request += (i ? "|" : "") + nearest[i];
  return request;
}

bool is_auto_rail_request(const std::string& devices) {
  return devices.compare(0, kRequestPrefix.size(), kRequestPrefix) == 0;
}

void resolve_auto_rail_requests(const std::vector<std::string>& host_key_of_rank,
                                std::vector<std::string>& devices_of_rank) {
  std::map<std::string, std::map<std::string, int>> taken;  // per host key: device -> ranks
  for (size_t r = 0; r < devices_of_rank.size(); ++r) {
    if (is_auto_rail_request(devices_of_rank[r])) continue;
    for (const std::string& device : split(devices_of_rank[r], ','))
      ++taken[host_key_of_rank.at(r)][device];
  }
  for (size_t r = 0; r < devices_of_rank.size(); ++r) {
    std::string& devices = devices_of_rank[r];
    if (!is_auto_rail_request(devices)) continue;
    const std::vector<std::string> nearest = split(devices.substr(kRequestPrefix.size()), '|');
    if (nearest.empty()) {
      devices = "all";
      continue;
    }
    std::map<std::string, int>& on_host = taken[host_key_of_rank.at(r)];
    const std::string* least = &nearest[0];
    for (const std::string& device : nearest)
      if (on_host[device] < on_host[*least]) least = &device;
    ++on_host[*least];
    devices = *least;
  }
}

}  // namespace tpf::topo
