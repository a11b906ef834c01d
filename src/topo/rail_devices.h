// A network device per rail: local rank l of every host crosses the network through device
// l mod count of one list, as GPU servers pair each GPU with its nearest NIC. Given to every rank
// by `tpf run --rail-devices` (apps/cli) or, under other launchers (torchrun, mpirun, srun), by
// TPF_RAIL_DEVICES with the launcher's local rank (comm/settings.cc). Or chosen by topology
// ("auto"): each rank publishes the devices nearest to it (topo/network_devices.h) with its host
// key when a communicator is created (comm/host_discovery.cc), and every rank resolves the same
// choice from the same list.
#pragma once

#include <string>
#include <vector>

namespace tpf::topo {

// "mlx5_0:1,mlx5_1:1" -> {"mlx5_0:1", "mlx5_1:1"}; "auto" -> {"auto"} (is_auto). Throws
// Error(invalid_argument), the message starting with `what` (the option or setting), for an item
// that is not a device name (empty, or with a space or '=') and for auto among device names.
std::vector<std::string> parse_rail_devices(const std::string& text, const std::string& what);

// The device of local rank `local_rank`'s rail (devices not empty, local_rank >= 0).
const std::string& rail_device(const std::vector<std::string>& devices, int local_rank);

// The list that asks for devices chosen by topology: {"auto"}, parsed from "auto".
inline constexpr const char* kAutoRailDevices = "auto";
bool is_auto(const std::vector<std::string>& devices);

// What a rank publishes as its devices when it asks for one chosen by topology: "auto:" and the
// devices nearest to it, '|'-separated ("auto:" alone where it found none).
std::string auto_rail_request(const std::vector<std::string>& nearest);
bool is_auto_rail_request(const std::string& devices);
// Turns every such request in `devices_of_rank` (per rank, in rank order; `host_key_of_rank`
// their hosts) into one device: the ranks of a host, in rank order, each take the nearest device
// that the fewest of the host's ranks took before it (the first of those where several tie),
// devices named outright counting as taken; no nearest device leaves UCX's default, "all". So a
// rank per NIC gets a NIC of its own wherever its binding allows, and ranks bound to one socket
// spread over that socket's NICs.
void resolve_auto_rail_requests(const std::vector<std::string>& host_key_of_rank,
                                std::vector<std::string>& devices_of_rank);

}  // namespace tpf::topo
