#include "topo/rail_devices.h"

#include <algorithm>

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
  return devices;
}

const std::string& rail_device(const std::vector<std::string>& devices, int local_rank) {
  if (devices.empty() || local_rank < 0) {
    throw Error(ErrorCode::internal, "no rail device for local rank " + std::to_string(local_rank) +
                                         " among " + std::to_string(devices.size()));
  }
  return devices[static_cast<size_t>(local_rank) % devices.size()];
}

}  // namespace tpf::topo
