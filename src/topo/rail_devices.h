// A network device per rail: local rank l of every host crosses the network through device
// l mod count of one list, as GPU servers pair each GPU with its nearest NIC. Given to every rank
// by `tpf run --rail-devices` (apps/cli) or, under other launchers (torchrun, mpirun, srun), by
// TPF_RAIL_DEVICES with the launcher's local rank (comm/settings.cc).
#pragma once

#include <string>
#include <vector>

namespace tpf::topo {

// "mlx5_0:1,mlx5_1:1" -> {"mlx5_0:1", "mlx5_1:1"}. Throws Error(invalid_argument), the message
// starting with `what` (the option or setting), for an item that is not a device name: empty, or
// with a space or '='.
std::vector<std::string> parse_rail_devices(const std::string& text, const std::string& what);

// The device of local rank `local_rank`'s rail (devices not empty, local_rank >= 0).
const std::string& rail_device(const std::vector<std::string>& devices, int local_rank);

}  // namespace tpf::topo
