#include "plan/cluster.h"

#include <filesystem>
#include <utility>

#include "formats/text_files.h"
#include "plan/invalid_input.h"
#include "plan/yaml_fields.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

void require_positive(double value, const char* field) {
  if (!(value > 0)) invalid(std::string("cluster: ") + field + " must be positive");
}

RoutingMode parse_routing_mode(const std::string& text, const YamlFields& fields) {
  for (RoutingMode mode : {RoutingMode::ecmp, RoutingMode::spray, RoutingMode::adaptive}) {
    if (text == to_string(mode)) return mode;
  }
  fields.fail("mode", "'" + text + "': expected ecmp, spray or adaptive");
}

// A100-SXM 80 GB: BF16 GEMMs 271.2 of 312 TFLOP/s at their best shape (86.9 %, the same
// benchmark as H100's in cluster.h); fused attention about 50 % of peak at large sizes
// (FlashAttention-2, read approximately from the paper's figures), falling at small ones as
// measured on Hopper, with the rows that fill the GPU scaled to its 108 SMs (132 on Hopper):
// assumed, not measured; no FP8 tensor cores.
AcceleratorSpec a100_sxm_80gb() {
  AcceleratorSpec gpu;
  gpu.name = "A100-SXM-80GB";
  gpu.peak_tflops = 312;
  gpu.fp8_peak_tflops = 0;
  gpu.memory_gb = 80;
  gpu.hbm_gbps = 2039;
  gpu.max_gemm_efficiency = 0.869 * kInTrainingFraction;
  gpu.max_fp8_gemm_efficiency = 1;  // unused without an FP8 peak
  gpu.attention_efficiency = 0.50 * kInTrainingFraction;
  gpu.attention_half_rows = 17920.0 * 108 / 132;
  return gpu;
}

// DGX-H100: 8 x H100-SXM (989 dense BF16 and 1979 FP8 TFLOP/s, 80 GB HBM3 at 3.35 TB/s), NVLink 4
// through NVSwitch at 450 GB/s per direction, 8 x 400 Gb/s ConnectX-7 NDR InfiniBand,
// rail-optimized fat-tree of 64-port NDR switches (NVIDIA's DGX SuperPOD reference architecture).
ClusterSpec dgx_h100() {
  ClusterSpec c;
  c.name = "dgx-h100";
  c.gpu = AcceleratorSpec{};  // an H100-SXM
  c.scale_up = {"nvlink4", 450, 2.0, 0.85};
  c.nics_per_node = 8;
  c.nic_gbits = 400;
  c.network.switch_radix = 64;
  return c;
}

// DGX-A100: 8 x A100-SXM 80 GB (312 dense BF16 TFLOP/s, 2.04 TB/s), NVLink 3 at 300 GB/s per
// direction, 8 x 200 Gb/s HDR InfiniBand, rail-optimized fat-tree of 40-port HDR switches.
ClusterSpec dgx_a100() {
  ClusterSpec c;
  c.name = "dgx-a100";
  c.gpu = a100_sxm_80gb();
  c.scale_up = {"nvlink3", 300, 2.0, 0.85};
  c.nics_per_node = 8;
  c.nic_gbits = 200;
  c.network.switch_radix = 40;
  return c;
}

// The same node on a 2:1 oversubscribed, non-rail leaf-spine network with one 400 Gb/s NIC per
// two GPUs: the kind of cloud cluster whose network shows in the step time.
ClusterSpec h100_ethernet() {
  ClusterSpec c = dgx_h100();
  c.name = "h100-ethernet";
  c.nics_per_node = 4;
  c.network.oversubscription = 2.0;
  c.network.rail_optimized = false;
  c.network.efficiency = 0.90;
  return c;
}

}  // namespace

const char* to_string(RoutingMode mode) {
  switch (mode) {
    case RoutingMode::ecmp: return "ecmp";
    case RoutingMode::spray: return "spray";
    case RoutingMode::adaptive: return "adaptive";
  }
  return "?";
}

void validate(const ClusterSpec& c) {
  if (c.nodes < 1) invalid("cluster: nodes must be at least 1");
  if (c.gpus_per_node < 1) invalid("cluster: node.gpus must be at least 1");
  if (c.nics_per_node < 1) invalid("cluster: node.nics must be at least 1");
  if (c.gpus_per_node > 1024 || c.nics_per_node > 1024) {
    invalid("cluster: node.gpus and node.nics must be at most 1024");
  }
  if (static_cast<long long>(c.nodes) * c.gpus_per_node > kMaxClusterGpus ||
      static_cast<long long>(c.nodes) * c.nics_per_node > kMaxClusterGpus) {
    invalid("cluster: " + std::to_string(c.nodes) + " nodes: more than the planner's limit of " +
            std::to_string(kMaxClusterGpus) + " GPUs or NICs");
  }
  if (c.gpus_per_node % c.nics_per_node != 0 && c.nics_per_node % c.gpus_per_node != 0) {
    invalid("cluster: node.gpus (" + std::to_string(c.gpus_per_node) + ") and node.nics (" +
            std::to_string(c.nics_per_node) + ") must divide one another");
  }
  require_positive(c.gpu.peak_tflops, "node.gpu.peak_tflops");
  require_positive(c.gpu.memory_gb, "node.gpu.memory_gb");
  require_positive(c.gpu.hbm_gbps, "node.gpu.hbm_gbps");
  if (!(c.gpu.fp8_peak_tflops >= 0)) invalid("cluster: node.gpu.fp8_peak_tflops must be >= 0");
  if (!(c.gpu.fp32_peak_tflops >= 0)) invalid("cluster: node.gpu.fp32_peak_tflops must be >= 0");
  if (!(c.gpu.gemm_overhead_us >= 0)) invalid("cluster: node.gpu.gemm_overhead_us must be >= 0");
  if (!(c.gpu.attention_half_keys >= 0)) {
    invalid("cluster: node.gpu.attention_half_keys must be >= 0");
  }
  if (!(c.gpu.attention_half_rows >= 0)) {
    invalid("cluster: node.gpu.attention_half_rows must be >= 0");
  }
  const std::pair<double, const char*> fractions[] = {
      {c.gpu.max_gemm_efficiency, "max_gemm_efficiency"},
      {c.gpu.max_fp8_gemm_efficiency, "max_fp8_gemm_efficiency"},
      {c.gpu.max_fp32_gemm_efficiency, "max_fp32_gemm_efficiency"},
      {c.gpu.attention_efficiency, "attention_efficiency"}};
  for (const auto& [value, field] : fractions) {
    if (!(value > 0 && value <= 1)) {
      invalid(std::string("cluster: node.gpu.") + field + " must be in (0, 1]");
    }
  }
  require_positive(c.scale_up.bandwidth_gbps, "node.scale_up.bandwidth_gbps");
  if (!(c.scale_up.latency_us >= 0)) invalid("cluster: node.scale_up.latency_us must be >= 0");
  if (!(c.scale_up.efficiency > 0 && c.scale_up.efficiency <= 1)) {
    invalid("cluster: node.scale_up.efficiency must be in (0, 1]");
  }
  require_positive(c.nic_gbits, "node.nic_gbits");
  if (!(c.nic_latency_us >= 0)) invalid("cluster: node.nic_latency_us must be >= 0");
  const NetworkSpec& n = c.network;
  if (n.tiers != 0 && n.tiers != 2 && n.tiers != 3) {
    invalid("cluster: network.tiers must be 2, 3 or 0 (fewest that fit), got " +
            std::to_string(n.tiers));
  }
  if (n.switch_radix < 4 || n.switch_radix > 1024 || n.switch_radix % 2 != 0) {
    invalid("cluster: network.switch_radix must be an even number from 4 to 1024, got " +
            std::to_string(n.switch_radix));
  }
  if (!(n.oversubscription >= 1)) invalid("cluster: network.oversubscription must be >= 1");
  if (n.planes < 1 || n.planes > 8) invalid("cluster: network.planes must be 1 to 8");
  if (!(n.link_latency_us >= 0)) invalid("cluster: network.link_latency_us must be >= 0");
  if (!(n.efficiency > 0 && n.efficiency <= 1)) {
    invalid("cluster: network.efficiency must be in (0, 1]");
  }
  if (c.routing.queue_pairs < 1 || c.routing.queue_pairs > 64) {
    invalid("cluster: routing.queue_pairs must be 1 to 64");
  }
  if (c.failures.random_links < 0) invalid("cluster: failures.random_links must be >= 0");
}

std::vector<std::string> cluster_preset_names() {
  return {"dgx-h100", "dgx-a100", "h100-ethernet"};
}

ClusterSpec cluster_preset(const std::string& name, int gpus) {
  ClusterSpec cluster;
  if (name == "dgx-h100") {
    cluster = dgx_h100();
  } else if (name == "dgx-a100") {
    cluster = dgx_a100();
  } else if (name == "h100-ethernet") {
    cluster = h100_ethernet();
  } else {
    std::string names;
    for (const std::string& known : cluster_preset_names()) names += " " + known;
    invalid("unknown cluster '" + name + "': not a file, and not a preset (presets:" + names + ")");
  }
  if (gpus <= 0) gpus = cluster.gpus_per_node;
  if (gpus > kMaxClusterGpus) {
    invalid("--gpus " + std::to_string(gpus) + ": more than the planner's limit of " +
            std::to_string(kMaxClusterGpus));
  }
  if (gpus % cluster.gpus_per_node != 0) {
    invalid("--gpus " + std::to_string(gpus) + ": the " + name + " preset has " +
            std::to_string(cluster.gpus_per_node) + " GPUs per node; ask for a multiple of it");
  }
  cluster.nodes = gpus / cluster.gpus_per_node;
  // A 3-tier fat-tree of k-port switches connects k^3/4 NICs. Beyond that, clusters are built
  // from switches with twice the ports (e.g. 51.2 Tb/s, 128 x 400G); the preset does the same.
  const double nics = static_cast<double>(cluster.nodes) * cluster.nics_per_node;
  const double k = cluster.network.switch_radix;
  if (nics > k * k * k / 4) cluster.network.switch_radix *= 2;
  validate(cluster);
  return cluster;
}

ClusterSpec parse_cluster_yaml(const std::string& text, const std::string& origin) {
  const YAML::Node root = parse_yaml_document(text, origin);
  YamlFields top(root, origin, "", {"name", "nodes", "node", "network", "routing", "failures"});
  ClusterSpec c;
  c.network.switch_radix = 64;
  top.read("name", c.name);
  top.read("nodes", c.nodes);
  if (top.has("node")) {
    YamlFields node =
        top.child("node", {"gpus", "gpu", "scale_up", "nics", "nic_gbits", "nic_latency_us"});
    node.read("gpus", c.gpus_per_node);
    node.read("nics", c.nics_per_node);
    node.read("nic_gbits", c.nic_gbits);
    node.read("nic_latency_us", c.nic_latency_us);
    if (node.has("gpu")) {
      YamlFields gpu = node.child(
          "gpu", {"name", "peak_tflops", "fp8_peak_tflops", "fp32_peak_tflops", "memory_gb",
                  "hbm_gbps", "max_gemm_efficiency", "max_fp8_gemm_efficiency",
                  "max_fp32_gemm_efficiency", "gemm_overhead_us", "attention_efficiency",
                  "attention_half_keys", "attention_half_rows"});
      gpu.read("name", c.gpu.name);
      gpu.read("peak_tflops", c.gpu.peak_tflops);
      gpu.read("fp8_peak_tflops", c.gpu.fp8_peak_tflops);
      gpu.read("fp32_peak_tflops", c.gpu.fp32_peak_tflops);
      gpu.read("memory_gb", c.gpu.memory_gb);
      gpu.read("hbm_gbps", c.gpu.hbm_gbps);
      gpu.read("max_gemm_efficiency", c.gpu.max_gemm_efficiency);
      gpu.read("max_fp8_gemm_efficiency", c.gpu.max_fp8_gemm_efficiency);
      gpu.read("max_fp32_gemm_efficiency", c.gpu.max_fp32_gemm_efficiency);
      gpu.read("gemm_overhead_us", c.gpu.gemm_overhead_us);
      gpu.read("attention_efficiency", c.gpu.attention_efficiency);
      gpu.read("attention_half_keys", c.gpu.attention_half_keys);
      gpu.read("attention_half_rows", c.gpu.attention_half_rows);
    }
    if (node.has("scale_up")) {
      YamlFields up =
          node.child("scale_up", {"name", "bandwidth_gbps", "latency_us", "efficiency"});
      up.read("name", c.scale_up.name);
      up.read("bandwidth_gbps", c.scale_up.bandwidth_gbps);
      up.read("latency_us", c.scale_up.latency_us);
      up.read("efficiency", c.scale_up.efficiency);
    }
  }
  if (top.has("network")) {
    YamlFields net =
        top.child("network", {"tiers", "switch_radix", "oversubscription", "rail_optimized", "pxn",
                              "planes", "link_latency_us", "efficiency"});
    net.read("tiers", c.network.tiers);
    net.read("switch_radix", c.network.switch_radix);
    net.read("oversubscription", c.network.oversubscription);
    net.read("rail_optimized", c.network.rail_optimized);
    net.read("pxn", c.network.pxn);
    net.read("planes", c.network.planes);
    net.read("link_latency_us", c.network.link_latency_us);
    net.read("efficiency", c.network.efficiency);
  }
  if (top.has("routing")) {
    YamlFields routing = top.child("routing", {"mode", "seed", "queue_pairs", "per_switch_hash"});
    std::string mode = to_string(c.routing.mode);
    routing.read("mode", mode);
    c.routing.mode = parse_routing_mode(mode, routing);
    routing.read("seed", c.routing.seed);
    routing.read("queue_pairs", c.routing.queue_pairs);
    routing.read("per_switch_hash", c.routing.per_switch_hash);
  }
  if (top.has("failures")) {
    YamlFields failures = top.child("failures", {"links", "random_links", "seed"});
    if (failures.has("links")) {
      const YAML::Node links = failures.node()["links"];
      if (!links.IsSequence()) failures.fail("links", "expected a list of link names");
      for (const auto& link : links) {
        if (!link.IsScalar()) failures.fail("links", "expected a list of link names (strings)");
        c.failures.links.push_back(link.Scalar());
      }
    }
    failures.read("random_links", c.failures.random_links);
    failures.read("seed", c.failures.seed);
  }
  try {
    validate(c);
  } catch (const Error& e) {
    invalid(origin + ": " + e.what());
  }
  return c;
}

bool is_cluster_file(const std::string& name_or_path) {
  std::error_code ignored;
  return std::filesystem::exists(name_or_path, ignored);
}

ClusterSpec load_cluster(const std::string& name_or_path, int gpus) {
  // A name that is no file is a preset's; an existing file that cannot be read is an error.
  if (!is_cluster_file(name_or_path)) return cluster_preset(name_or_path, gpus);
  ClusterSpec cluster =
      parse_cluster_yaml(read_text_file(name_or_path, "cluster file"), name_or_path);
  if (gpus > 0) {
    if (gpus % cluster.gpus_per_node != 0) {
      invalid("--gpus " + std::to_string(gpus) + ": " + name_or_path + " has " +
              std::to_string(cluster.gpus_per_node) + " GPUs per node; ask for a multiple of it");
    }
    cluster.nodes = gpus / cluster.gpus_per_node;
  }
  return cluster;
}

std::string cluster_to_yaml(const ClusterSpec& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(6);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "nodes" << YAML::Value << c.nodes;
  out << YAML::Key << "node" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "gpus" << YAML::Value << c.gpus_per_node;
  out << YAML::Key << "gpu" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.gpu.name;
  out << YAML::Key << "peak_tflops" << YAML::Value << c.gpu.peak_tflops;
  out << YAML::Key << "fp8_peak_tflops" << YAML::Value << c.gpu.fp8_peak_tflops;
  out << YAML::Key << "fp32_peak_tflops" << YAML::Value << c.gpu.fp32_peak_tflops;
  out << YAML::Key << "memory_gb" << YAML::Value << c.gpu.memory_gb;
  out << YAML::Key << "hbm_gbps" << YAML::Value << c.gpu.hbm_gbps;
  out << YAML::Key << "max_gemm_efficiency" << YAML::Value << c.gpu.max_gemm_efficiency;
  out << YAML::Key << "max_fp8_gemm_efficiency" << YAML::Value << c.gpu.max_fp8_gemm_efficiency;
  out << YAML::Key << "max_fp32_gemm_efficiency" << YAML::Value << c.gpu.max_fp32_gemm_efficiency;
  out << YAML::Key << "gemm_overhead_us" << YAML::Value << c.gpu.gemm_overhead_us;
  out << YAML::Key << "attention_efficiency" << YAML::Value << c.gpu.attention_efficiency;
  out << YAML::Key << "attention_half_keys" << YAML::Value << c.gpu.attention_half_keys;
  out << YAML::Key << "attention_half_rows" << YAML::Value << c.gpu.attention_half_rows;
  out << YAML::EndMap;
  out << YAML::Key << "scale_up" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.scale_up.name;
  out << YAML::Key << "bandwidth_gbps" << YAML::Value << c.scale_up.bandwidth_gbps;
  out << YAML::Key << "latency_us" << YAML::Value << c.scale_up.latency_us;
  out << YAML::Key << "efficiency" << YAML::Value << c.scale_up.efficiency;
  out << YAML::EndMap;
  out << YAML::Key << "nics" << YAML::Value << c.nics_per_node;
  out << YAML::Key << "nic_gbits" << YAML::Value << c.nic_gbits;
  out << YAML::Key << "nic_latency_us" << YAML::Value << c.nic_latency_us;
  out << YAML::EndMap;
  out << YAML::Key << "network" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "tiers" << YAML::Value << c.network.tiers;
  out << YAML::Key << "switch_radix" << YAML::Value << c.network.switch_radix;
  out << YAML::Key << "oversubscription" << YAML::Value << c.network.oversubscription;
  out << YAML::Key << "rail_optimized" << YAML::Value << c.network.rail_optimized;
  out << YAML::Key << "pxn" << YAML::Value << c.network.pxn;
  out << YAML::Key << "planes" << YAML::Value << c.network.planes;
  out << YAML::Key << "link_latency_us" << YAML::Value << c.network.link_latency_us;
  out << YAML::Key << "efficiency" << YAML::Value << c.network.efficiency;
  out << YAML::EndMap;
  out << YAML::Key << "routing" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mode" << YAML::Value << to_string(c.routing.mode);
  out << YAML::Key << "seed" << YAML::Value << c.routing.seed;
  out << YAML::Key << "queue_pairs" << YAML::Value << c.routing.queue_pairs;
  out << YAML::Key << "per_switch_hash" << YAML::Value << c.routing.per_switch_hash;
  out << YAML::EndMap;
  out << YAML::Key << "failures" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "links" << YAML::Value << YAML::Flow << c.failures.links;
  out << YAML::Key << "random_links" << YAML::Value << c.failures.random_links;
  out << YAML::Key << "seed" << YAML::Value << c.failures.seed;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace tpf::plan
