// A rank's GPU and the NIC on its PCIe path (topo/gpus.h, topo::devices_nearest_gpu), on a
// two-socket GPU server described by an hwloc XML export (tests/fabric/data/two-sockets-four-
// gpus.xml): socket 0 with a BMC console (no GPU) and two PCIe switches of a GPU and an HCA each
// (0000:07:00.0 with mlx5_0, 0000:12:00.0 with mlx5_1), socket 1 with a switch of GPU
// 0000:87:00.0 and mlx5_2, a switch with GPU 0000:92:00.0 alone, and on the host bridge mlx5_3
// and mlx5_4, whose ports are all down.
#include "topo/gpus.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topo/hosts.h"
#include "topo/network_devices.h"
#include "topo/rail_devices.h"
#include "tpf/error.h"

namespace tpf::topo {
namespace {

const std::string kGpuServer =
    std::string(TPF_SOURCE_DIR) + "/tests/fabric/data/two-sockets-four-gpus.xml";
const std::string kCpuServer =
    std::string(TPF_SOURCE_DIR) + "/tests/fabric/data/two-sockets-four-hcas.xml";

using Names = std::vector<std::string>;

TEST(Gpus, HwlocFindsTheGpusInPciOrderAndWhereEachSits) {
  const std::vector<Gpu> gpus = discover_gpus(kGpuServer);
  ASSERT_EQ(gpus.size(), 4u);  // not the ASPEED console at 0000:03:00.0
  const Names busids{"0000:07:00.0", "0000:12:00.0", "0000:87:00.0", "0000:92:00.0"};
  for (size_t i = 0; i < gpus.size(); ++i) EXPECT_EQ(gpus[i].pci_busid, busids[i]);
  EXPECT_EQ(gpus[2].pci_path, (Names{"Machine#0", "Package#1", "host bridge 0000:[80-ff]",
                                     "PCI bridge 0000:85:00.0", "PCI bridge 0000:86:00.0"}));
  // A machine without GPUs (the CPU-only server's export) has none.
  EXPECT_TRUE(discover_gpus(kCpuServer).empty());
}

TEST(Gpus, AGpuIsAnNvidiaOrAmdDisplayOrAcceleratorDevice) {
  EXPECT_TRUE(is_gpu(0x0302, 0x10de));   // NVIDIA A100 / H100: 3D controller
  EXPECT_TRUE(is_gpu(0x0300, 0x10de));   // NVIDIA, VGA
  EXPECT_TRUE(is_gpu(0x0380, 0x1002));   // AMD Instinct MI100 / MI200: display controller
  EXPECT_TRUE(is_gpu(0x1200, 0x1002));   // AMD Instinct MI300: processing accelerator
  EXPECT_FALSE(is_gpu(0x0300, 0x1a03));  // ASPEED BMC console
  EXPECT_FALSE(is_gpu(0x0300, 0x102b));  // Matrox BMC console
  EXPECT_FALSE(is_gpu(0x0300, 0x8086));  // Intel integrated graphics
  EXPECT_FALSE(is_gpu(0x1200, 0x1da3));  // Habana Gaudi: not a CUDA or ROCm device
  EXPECT_FALSE(is_gpu(0x0207, 0x15b3));  // a Mellanox HCA
}

// The HCA under the GPU's own switch; where the switch has none, those under its host bridge.
// The CPU binding alone (a rank bound to its GPU's socket) leaves each rank two HCAs to pick.
TEST(Gpus, ARankChoosesTheHcaOnItsGpusPcieSwitch) {
  const std::vector<NetworkDevice> devices = discover_network_devices(kGpuServer);
  const std::vector<Gpu> gpus = discover_gpus(kGpuServer);
  ASSERT_EQ(gpus.size(), 4u);
  EXPECT_EQ(devices_nearest_gpu(devices, gpus[0].pci_path), Names{"mlx5_0:1"});
  EXPECT_EQ(devices_nearest_gpu(devices, gpus[1].pci_path), Names{"mlx5_1:1"});
  EXPECT_EQ(devices_nearest_gpu(devices, gpus[2].pci_path), Names{"mlx5_2:1"});
  EXPECT_EQ(devices_nearest_gpu(devices, gpus[3].pci_path), (Names{"mlx5_2:1", "mlx5_3:1"}));
  // mlx5_4 is listed, down, and never a rail: not for GPU 3, not for a rank bound to its socket.
  ASSERT_EQ(devices.size(), 6u) << describe_devices(devices);  // eno1 and five HCAs
  EXPECT_TRUE(devices.back().down);
  EXPECT_EQ(describe_devices({devices.back()}), "mlx5_4:1 (cpus 4-7) (down)");
  EXPECT_EQ(nearest_devices(devices, {4, 5}), (Names{"mlx5_2:1", "mlx5_3:1"}));
  EXPECT_EQ(nearest_devices(devices, {0, 1, 2, 3}), (Names{"mlx5_0:1", "mlx5_1:1"}));
  // Across sockets only: every HCA of the machine is as near as any other.
  const std::vector<std::string> far{"Machine#0", "Package#7"};
  EXPECT_EQ(devices_nearest_gpu(devices, far),
            (Names{"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"}));
  // Devices of unknown place (a namespace's own interfaces) are all equally near.
  const std::vector<NetworkDevice> unplaced{{"veth0", "", false, {}, "", {}, false},
                                            {"veth1", "", false, {}, "", {}, false}};
  EXPECT_EQ(devices_nearest_gpu(unplaced, gpus[0].pci_path), (Names{"veth0", "veth1"}));
}

// Four ranks a host, local rank l driving GPU l, on two such servers: the rank of GPU 3, whose
// switch has no HCA, takes the host bridge's HCA that no rank of its host took (mlx5_3), so every
// rank has a rail of its own.
TEST(Gpus, EachRankOfAHostGetsTheHcaOfItsGpu) {
  const std::vector<NetworkDevice> devices = discover_network_devices(kGpuServer);
  const std::vector<Gpu> gpus = discover_gpus(kGpuServer);
  Names keys, chosen;
  for (int rank = 0; rank < 8; ++rank) {
    keys.push_back(rank < 4 ? "a" : "b");
    const GpuChoice gpu = choose_gpu(gpus, {.local_rank = rank % 4});
    ASSERT_TRUE(gpu.gpu.has_value()) << gpu.why;
    chosen.push_back(auto_rail_request(devices_nearest_gpu(devices, gpus[*gpu.gpu].pci_path)));
  }
  resolve_auto_rail_requests(keys, chosen);
  EXPECT_EQ(chosen, (Names{"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "mlx5_0:1", "mlx5_1:1",
                           "mlx5_2:1", "mlx5_3:1"}));
  EXPECT_TRUE(HostMap(keys, chosen).rails_have_own_links());
}

std::optional<size_t> gpu_of(const GpuHints& hints) {
  return choose_gpu(discover_gpus(kGpuServer), hints).gpu;
}

TEST(Gpus, TheRanksGpuFollowsTheLocalRankThroughCudaVisibleDevices) {
  EXPECT_EQ(gpu_of({.local_rank = 1}), 1u);  // torchrun's cuda:LOCAL_RANK, every GPU visible
  EXPECT_EQ(gpu_of({.local_rank = 6}), 2u);  // more ranks than GPUs: local rank mod 4
  EXPECT_EQ(gpu_of({.cuda_visible_devices = "2,3", .local_rank = 0}), 2u);
  EXPECT_EQ(gpu_of({.cuda_visible_devices = "2, 3", .local_rank = 1}), 3u);
  // Slurm's one GPU per task: the one it sees, whatever the local rank.
  EXPECT_EQ(gpu_of({.cuda_visible_devices = "3", .local_rank = 2}), 3u);
  // Read as CUDA reads it: up to the first index that is not a GPU of the machine, or repeats.
  EXPECT_EQ(gpu_of({.cuda_visible_devices = "1,7,2", .local_rank = 1}), 1u);
  EXPECT_EQ(gpu_of({.cuda_visible_devices = "3,3", .local_rank = 1}), 3u);
  // No GPU: none visible, named by UUID (only CUDA maps those), or no launcher's local rank.
  for (const char* none : {"", "-1", "GPU-5f1e3c2a-0000-0000-0000-000000000000"})
    EXPECT_EQ(gpu_of({.cuda_visible_devices = none, .local_rank = 0}), std::nullopt) << none;
  EXPECT_NE(
      choose_gpu(discover_gpus(kGpuServer), {.cuda_visible_devices = "GPU-5f1e", .local_rank = 0})
          .why.find("set TPF_GPU"),
      std::string::npos);
  EXPECT_EQ(gpu_of({}), std::nullopt);
  EXPECT_EQ(choose_gpu({}, {.local_rank = 0}).why, "no GPU on PCI");
}

TEST(Gpus, TpfGpuNamesTheGpuByBusIdOrIndexAndBadValuesAreNamed) {
  EXPECT_EQ(gpu_of({.tpf_gpu = "0000:87:00.0", .local_rank = 0}), 2u);
  EXPECT_EQ(gpu_of({.tpf_gpu = "87:00.0"}), 2u);  // domain 0, no launcher needed
  EXPECT_EQ(gpu_of({.tpf_gpu = "0000:92:00.0"}), 3u);
  EXPECT_EQ(gpu_of({.tpf_gpu = "3", .cuda_visible_devices = "0"}), 3u);
  EXPECT_EQ(gpu_of({.tpf_gpu = "none", .local_rank = 0}), std::nullopt);
  for (const char* bad : {"4", "0000:03:00.0", "gpu0", ""}) {
    try {
      gpu_of({.tpf_gpu = bad});
      ADD_FAILURE() << "accepted TPF_GPU=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()).rfind("TPF_GPU='" + std::string(bad) + "' names no GPU", 0),
                0u)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("3 = 0000:92:00.0"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpf::topo
