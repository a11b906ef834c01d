#include "topo/gpus.h"

#include <hwloc.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "base/env_config.h"
#include "topo/hwloc_topology.h"
#include "tpf/error.h"

namespace tpf::topo {
namespace {

constexpr unsigned kDisplayClass = 0x03;      // PCI base classes
constexpr unsigned kAcceleratorClass = 0x12;  // processing accelerators
constexpr unsigned kNvidia = 0x10de;
constexpr unsigned kAmd = 0x1002;

std::optional<size_t> parse_index(const std::string& text) {
  size_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "07:00.0" -> "0000:07:00.0"; lower case, as hwloc prints bus ids.
std::string full_busid(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::count(text.begin(), text.end(), ':') == 1 ? "0000:" + text : text;
}

std::string list_of(const std::vector<Gpu>& gpus) {
  std::string text;
  for (size_t i = 0; i < gpus.size(); ++i)
    text += (i ? ", " : "") + std::to_string(i) + " = " + gpus[i].pci_busid;
  return text.empty() ? "none" : text;
}

GpuChoice named_gpu(const std::vector<Gpu>& gpus, const std::string& text) {
  if (text == "none") return {std::nullopt, "TPF_GPU=none"};
  std::optional<size_t> index = parse_index(text);
  if (!index) {
    const std::string busid = full_busid(text);
    for (size_t i = 0; i < gpus.size() && !index; ++i)
      if (gpus[i].pci_busid == busid) index = i;
  }
  if (!index || *index >= gpus.size()) {
    throw Error(ErrorCode::invalid_argument,
                "TPF_GPU='" + text +
                    "' names no GPU of this machine (a PCI bus id or an index in PCI order, or "
                    "none; the GPUs hwloc sees: " +
                    list_of(gpus) + ")");
  }
  return {index, "TPF_GPU=" + text};
}

// CUDA's reading of CUDA_VISIBLE_DEVICES: indexes up to the first that is not a valid, new one.
// nullopt where it names devices by UUID ("GPU-...", "MIG-..."), which only CUDA can map.
std::optional<std::vector<size_t>> visible_indexes(const std::string& text, size_t gpus) {
  std::vector<size_t> visible;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, end - begin);
    std::erase_if(item, [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) return std::nullopt;
    const std::optional<size_t> index = parse_index(item);
    if (!index || *index >= gpus || std::count(visible.begin(), visible.end(), *index) > 0) break;
    visible.push_back(*index);
    begin = end + 1;
  }
  return visible;
}

}  // namespace

bool is_gpu(unsigned pci_class_id, unsigned pci_vendor_id) {
  const unsigned base_class = pci_class_id >> 8;
  return (base_class == kDisplayClass || base_class == kAcceleratorClass) &&
         (pci_vendor_id == kNvidia || pci_vendor_id == kAmd);
}

std::vector<Gpu> discover_gpus(const std::string& hwloc_xml) {
  const Topology topology = load_topology({.with_io = true, .xml = hwloc_xml});
  return gpus_in(topology.get());
}

std::vector<Gpu> gpus_in(hwloc_topology* io_topology) {
  std::vector<Gpu> gpus;
  if (io_topology == nullptr) return gpus;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(io_topology, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(io_topology, o)) {
    const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = o->attr->pcidev;
    if (!is_gpu(pci.class_id, pci.vendor_id)) continue;
    Gpu gpu{pci_busid(pci), ancestry(o), cpus_near(io_topology, o), {}};
    if (hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(io_topology, o)) {
      for (int node = hwloc_bitmap_first(near->nodeset); node >= 0;
           node = hwloc_bitmap_next(near->nodeset, node))
        gpu.near_numa_nodes.push_back(node);
    }
    gpus.push_back(std::move(gpu));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci_busid < b.pci_busid; });
  return gpus;
}

GpuChoice choose_gpu(const std::vector<Gpu>& gpus, const GpuHints& hints) {
  if (hints.tpf_gpu) return named_gpu(gpus, *hints.tpf_gpu);
  if (gpus.empty()) return {std::nullopt, "no GPU on PCI"};
  if (!hints.local_rank) return {std::nullopt, "no launcher gives a local rank; set TPF_GPU"};
  std::vector<size_t> visible(gpus.size());
  for (size_t i = 0; i < visible.size(); ++i) visible[i] = i;
  if (hints.cuda_visible_devices) {
    const auto named = visible_indexes(*hints.cuda_visible_devices, gpus.size());
    if (!named) {
      return {std::nullopt,
              "CUDA_VISIBLE_DEVICES names GPUs by UUID, which only CUDA maps to "
              "PCI; set TPF_GPU"};
    }
    if (named->empty()) return {std::nullopt, "CUDA_VISIBLE_DEVICES leaves no GPU visible"};
    visible = *named;
  }
  const size_t device = static_cast<size_t>(*hints.local_rank) % visible.size();
  return {visible[device], "CUDA device " + std::to_string(device) + " of local rank " +
                               std::to_string(*hints.local_rank) +
                               (hints.cuda_visible_devices
                                    ? " through CUDA_VISIBLE_DEVICES=" + *hints.cuda_visible_devices
                                    : std::string(", every GPU visible"))};
}

GpuHints gpu_hints_from_environment(std::optional<int> local_rank) {
  // Set but empty, CUDA_VISIBLE_DEVICES hides every GPU (base::env_string reads it as unset).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return {.tpf_gpu = base::env_string("TPF_GPU"),
          .cuda_visible_devices = visible ? std::optional<std::string>(visible) : std::nullopt,
          .local_rank = local_rank};
}

}  // namespace tpf::topo
