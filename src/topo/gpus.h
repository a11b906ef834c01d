// The GPUs of this machine and which one this rank drives, so TPF_RAIL_DEVICES=auto can give a
// rank the NIC on its GPU's PCIe path (topo::devices_nearest_gpu), as NCCL does, rather than one
// next to its cores, and `tpf run --bind gpu` can pin it next to its GPU (tpf/topology.h). Read
// with hwloc from PCI (no CUDA needed): the NVIDIA and AMD GPUs (is_gpu; an ASPEED or Matrox BMC
// console is none), in PCI order, which is CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID and, on a
// server of one GPU model, its default order too.
#pragma once

#include <optional>
#include <string>
#include <vector>

struct hwloc_topology;  // hwloc.h's, for the loaded forms (topo/hwloc_topology.h)

namespace tpf::topo {

struct Gpu {
  std::string pci_busid;              // "0000:07:00.0"
  std::vector<std::string> pci_path;  // its ancestors in hwloc's tree (topo::ancestry)
  // Its nearest non-I/O ancestor's (the socket or NUMA node its PCIe root hangs off) CPUs (PU OS
  // indexes) and NUMA nodes (OS indexes): where `tpf run --bind gpu` pins its rank.
  std::vector<int> near_cpus;
  std::vector<int> near_numa_nodes;
};

// Whether a PCI device is a GPU: an NVIDIA or AMD device of the display class (VGA 0300, 3D
// 0302, other 0380) or of the processing accelerators (1200: AMD's Instinct MI300 line).
bool is_gpu(unsigned pci_class_id, unsigned pci_vendor_id);

// `hwloc_xml`: read that hwloc XML export instead of this machine (tests). Throws
// Error(invalid_argument) for an XML file hwloc cannot load.
std::vector<Gpu> discover_gpus(const std::string& hwloc_xml = "");
// The same from a topology loaded with I/O (topo::load_topology; null: none), so that a caller
// that reads the network devices too loads the machine once.
std::vector<Gpu> gpus_in(hwloc_topology* io_topology);

// What tells this rank's GPU: the settings as the environment gives them (nullopt: not set).
struct GpuHints {
  std::optional<std::string> tpf_gpu = std::nullopt;               // TPF_GPU
  std::optional<std::string> cuda_visible_devices = std::nullopt;  // CUDA_VISIBLE_DEVICES
  std::optional<int> local_rank = std::nullopt;  // the launcher's; nullopt: no launcher
};

struct GpuChoice {
  std::optional<size_t> gpu;  // into the GPUs given; nullopt: the rank drives none known
  std::string why;            // how it was chosen, or why none was, for the settings report
};

// TPF_GPU names the GPU outright: its PCI bus id ("0000:07:00.0", or "07:00.0" in domain 0), its
// index in PCI order, or "none". Otherwise a rank drives CUDA device (local rank mod the visible
// devices), torchrun's and Megatron's convention, where CUDA_VISIBLE_DEVICES, read as CUDA does
// (indexes up to the first that is not one; unset: every GPU), maps CUDA devices to GPUs. No
// GPU where the machine has none, no launcher gives a local rank, or CUDA_VISIBLE_DEVICES names
// GPUs by UUID (only CUDA can map those: set TPF_GPU). Throws Error(invalid_argument) naming
// TPF_GPU for a value that is none of those or names no GPU of `gpus`.
GpuChoice choose_gpu(const std::vector<Gpu>& gpus, const GpuHints& hints);

// TPF_GPU and CUDA_VISIBLE_DEVICES as this process's environment gives them, with `local_rank`.
GpuHints gpu_hints_from_environment(std::optional<int> local_rank);

}  // namespace tpf::topo
