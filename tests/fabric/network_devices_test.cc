// The network devices read with hwloc and the choice of TPF_RAIL_DEVICES=auto
// (topo/network_devices.h, topo/rail_devices.h), on a two-socket server described by an hwloc XML
// export (tests/fabric/data/two-sockets-four-hcas.xml): cores 0-3 with an Ethernet management
// port and mlx5_0 (port 1 active) and mlx5_1 (port 2 active), cores 4-7 with mlx5_2 and mlx5_3
// (no port state).
#include "topo/network_devices.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topo/hosts.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"

namespace tpf::topo {
namespace {

const std::string kServer =
    std::string(TPF_SOURCE_DIR) + "/tests/fabric/data/two-sockets-four-hcas.xml";

std::vector<int> cpus(int first, int last) {
  std::vector<int> out;
  for (int c = first; c <= last; ++c) out.push_back(c);
  return out;
}

TEST(NetworkDevices, HwlocGivesEachDeviceItsUcxNameAndTheCoresNextToIt) {
  const std::vector<NetworkDevice> devices = discover_network_devices(kServer);
  ASSERT_EQ(devices.size(), 6u) << describe_devices(devices);
  // PCI order; an RDMA device by its active port (port 1 where hwloc gives no state); the HCA's
  // own network interface listed beside it.
  const std::vector<std::string> names{"eno1",     "ibp23s0",  "mlx5_0:1",
                                       "mlx5_1:2", "mlx5_2:1", "mlx5_3:1"};
  const std::vector<std::string> busids{"0000:05:00.0", "0000:17:00.0", "0000:17:00.0",
                                        "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0"};
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].name, names[i]);
    EXPECT_EQ(devices[i].pci_busid, busids[i]) << names[i];
    EXPECT_EQ(devices[i].rdma, i >= 2) << names[i];
    EXPECT_EQ(devices[i].near_cpus, i < 4 ? cpus(0, 3) : cpus(4, 7)) << names[i];
    EXPECT_FALSE(devices[i].down) << names[i];  // an active port, or no state given
  }
  EXPECT_EQ(describe_devices({devices[0], devices[5]}), "eno1 (cpus 0-3), mlx5_3:1 (cpus 4-7)");
}

TEST(NetworkDevices, ARankChoosesAmongTheRdmaPortsNextToItsCores) {
  const std::vector<NetworkDevice> devices = discover_network_devices(kServer);
  using Names = std::vector<std::string>;
  EXPECT_EQ(nearest_devices(devices, {2}), (Names{"mlx5_0:1", "mlx5_1:2"}));
  EXPECT_EQ(nearest_devices(devices, cpus(4, 7)), (Names{"mlx5_2:1", "mlx5_3:1"}));
  // Unbound (every core), or bound across both sockets: all four.
  const Names all{"mlx5_0:1", "mlx5_1:2", "mlx5_2:1", "mlx5_3:1"};
  EXPECT_EQ(nearest_devices(devices, cpus(0, 7)), all);
  EXPECT_EQ(nearest_devices(devices, {3, 4}), all);
  EXPECT_EQ(nearest_devices(devices, {}), all);
  // Bound to cores no device is next to: all of them rather than none.
  EXPECT_EQ(nearest_devices(devices, {9}), all);
  // Without RDMA the Ethernet ports are the rails; a device of unknown locality is near anyone.
  const std::vector<NetworkDevice> ethernet{
      {"eth0", "0000:05:00.0", false, cpus(0, 3), "", {}, false},
      {"eth1", "0000:b1:00.0", false, cpus(4, 7), "", {}, false},
      {"veth9", "", false, {}, "", {}, false}};
  EXPECT_EQ(nearest_devices(ethernet, {5}), (Names{"eth1", "veth9"}));
  EXPECT_TRUE(nearest_devices({}, {5}).empty());
}

TEST(NetworkDevices, AFileHwlocCannotReadIsNamed) {
  try {
    discover_network_devices("/nonexistent/topology.xml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topology.xml"), std::string::npos)
        << e.what();
  }
}

// Four ranks a host bound as `tpf run --bind numa` binds them (local rank r to socket r mod 2), on
// two such servers: each rank of a host gets an HCA of its own next to its cores, and the hosts'
// rails then have links of their own.
TEST(RailDevices, AutoGivesEachRankOfAHostItsOwnNearestDevice) {
  const std::vector<NetworkDevice> devices = discover_network_devices(kServer);
  std::vector<std::string> keys, requested;
  for (int rank = 0; rank < 8; ++rank) {
    keys.push_back(rank < 4 ? "a" : "b");
    requested.push_back(
        auto_rail_request(nearest_devices(devices, rank % 2 == 0 ? cpus(0, 3) : cpus(4, 7))));
  }
  EXPECT_EQ(requested[0], "auto:mlx5_0:1|mlx5_1:2");
  EXPECT_TRUE(is_auto_rail_request(requested[0]));
  EXPECT_FALSE(is_auto_rail_request("mlx5_0:1"));
  std::vector<std::string> chosen = requested;
  resolve_auto_rail_requests(keys, chosen);
  const std::vector<std::string> per_host{"mlx5_0:1", "mlx5_2:1", "mlx5_1:2", "mlx5_3:1"};
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(chosen[rank], per_host[rank % 4]) << rank;
  EXPECT_TRUE(HostMap(keys, chosen).rails_have_own_links());
  EXPECT_FALSE(HostMap(keys, requested).rails_have_own_links());  // unresolved: shared lists
}

TEST(RailDevices, AutoSpreadsMoreRanksThanDevicesEvenlyAndCountsDevicesNamedOutright) {
  using Names = std::vector<std::string>;
  // Six unbound ranks on one host, two devices: three each, in turn.
  Names chosen(6, auto_rail_request({"eth0", "eth1"}));
  resolve_auto_rail_requests(Names(6, "h"), chosen);
  EXPECT_EQ(chosen, (Names{"eth0", "eth1", "eth0", "eth1", "eth0", "eth1"}));
  // A rank that named eth0 outright (rank 2) counts as its user: the others start with eth1.
  chosen = {auto_rail_request({"eth0", "eth1"}), auto_rail_request({"eth0", "eth1"}), "eth0"};
  resolve_auto_rail_requests(Names(3, "h"), chosen);
  EXPECT_EQ(chosen, (Names{"eth1", "eth0", "eth0"}));
  // Nothing found: UCX's default.
  chosen = {auto_rail_request({})};
  resolve_auto_rail_requests({"h"}, chosen);
  EXPECT_EQ(chosen, Names{"all"});
}

TEST(RailDevices, AutoIsTheOneWordListThatAsksForIt) {
  EXPECT_TRUE(is_auto(parse_rail_devices("auto", "--rail-devices")));
  EXPECT_FALSE(is_auto(parse_rail_devices("eth0", "--rail-devices")));
  try {
    parse_rail_devices("eth0,auto", "--rail-devices");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()).rfind("--rail-devices: 'eth0,auto' mixes auto", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace tpf::topo
