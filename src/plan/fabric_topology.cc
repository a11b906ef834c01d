#include "plan/fabric_topology.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "plan/invalid_input.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// SplitMix64: a deterministic generator for choosing failed links (the same on every platform,
// unlike the standard distributions).
uint64_t split_mix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

// Link ids of one plane, as routing needs them; -1 marks an absent or failed link.
struct FabricTopology::Plane {
  std::vector<int> nic_up, nic_down;      // per NIC
  std::vector<std::vector<int>> leaf_up;  // per leaf: its surviving links to upper switches
  std::vector<int> down_to_leaf;          // [upper * leaves_per_pod + leaf within pod]
  std::vector<std::vector<int>> agg_up;   // 3 tiers, per aggregation switch: links to cores
  std::vector<int> core_down;             // 3 tiers, [core * pods + pod]
  std::vector<int> leaf_up_trunk, leaf_down_trunk, pod_up_trunk, pod_down_trunk;
};

FabricTopology::~FabricTopology() = default;
FabricTopology::FabricTopology(FabricTopology&&) noexcept = default;

FabricTopology::FabricTopology(const ClusterSpec& cluster) {
  validate(cluster);
  const NetworkSpec& net = cluster.network;
  const int k = net.switch_radix;
  planes_ = net.planes;
  nics_per_node_ = cluster.nics_per_node;
  nics_ = cluster.nodes * cluster.nics_per_node;
  rail_optimized_ = net.rail_optimized;
  // Every plane is a copy of the fabric; a NIC's bandwidth is split over its planes.
  link_gbps_ = cluster.nic_gbps() / planes_ * net.efficiency;
  link_latency_us_ = net.link_latency_us;

  leaf_up_ = std::max(1, static_cast<int>(std::lround(k / (1.0 + net.oversubscription))));
  leaf_down_ = k - leaf_up_;
  if (leaf_down_ < 1) invalid("cluster: network.oversubscription leaves no leaf downlinks");
  if (rail_optimized_) {
    // A rail group: leaf_down nodes whose NIC i all go to leaf i of the group.
    rail_group_nodes_ = leaf_down_;
    leaves_ = ceil_div(cluster.nodes, rail_group_nodes_) * nics_per_node_;
  } else {
    leaves_ = ceil_div(nics_, leaf_down_);
  }
  tiers_ = net.tiers != 0 ? net.tiers : (leaves_ <= k ? 2 : 3);
  if (tiers_ == 2) {
    if (leaves_ > k) {
      invalid("cluster: " + std::to_string(nics_) + " NICs need " + std::to_string(leaves_) +
              " leaves, more than a 2-tier network of " + std::to_string(k) +
              "-port spines connects; use network.tiers: 3 or a larger switch_radix");
    }
    leaves_per_pod_ = leaves_;
    pods_ = 1;
    uppers_ = leaf_up_;  // spines: one link from every leaf
  } else {
    leaves_per_pod_ = k / 2;  // aggregation switches: k/2 down, k/2 up
    pods_ = ceil_div(leaves_, leaves_per_pod_);
    if (pods_ > k) {
      invalid("cluster: " + std::to_string(nics_) + " NICs need " + std::to_string(pods_) +
              " pods, more than a 3-tier fat-tree of " + std::to_string(k) +
              "-port switches connects (" + std::to_string(k * k / 2 * leaf_down_) +
              " NICs); use a larger switch_radix");
    }
    uppers_ = pods_ * leaf_up_;
    core_links_per_agg_ = k / 2;
    cores_ = leaf_up_ * core_links_per_agg_;
  }
  const size_t per_plane = 2 * (static_cast<size_t>(nics_) + size_t(leaves_) * leaf_up_ +
                                size_t(uppers_) * core_links_per_agg_ + leaves_ + pods_);
  for (auto* table : {&reverse_, &upper_of_link_, &core_of_link_})
    table->reserve(per_plane * planes_);
  links_.reserve(per_plane * planes_);
  ends_.reserve(per_plane * planes_);
  plane_links_.resize(planes_);
  for (int plane = 0; plane < planes_; ++plane) build_plane(plane);
  fail_links(cluster.failures);
  drop_failed_candidates();
  build_trunks();
}

int FabricTopology::add_link(double gbps, double latency_us, LinkEnds ends) {
  links_.push_back({gbps, latency_us, false, false});
  ends_.push_back(ends);
  reverse_.push_back(-1);
  upper_of_link_.push_back(-1);
  core_of_link_.push_back(-1);
  return static_cast<int>(links_.size()) - 1;
}

void FabricTopology::build_plane(int plane) {
  Plane& p = plane_links_[plane];
  const uint8_t pl = static_cast<uint8_t>(plane);
  auto cable = [&](End a_kind, int a, End b_kind, int b) {
    int up = add_link(link_gbps_, link_latency_us_, {a_kind, b_kind, pl, a, b});
    int down = add_link(link_gbps_, link_latency_us_, {b_kind, a_kind, pl, b, a});
    reverse_[up] = down;
    reverse_[down] = up;
    return std::pair{up, down};
  };
  p.nic_up.resize(nics_);
  p.nic_down.resize(nics_);
  for (int nic = 0; nic < nics_; ++nic) {
    auto [up, down] = cable(End::nic, nic, End::leaf, leaf_of(nic, plane));
    p.nic_up[nic] = up;
    p.nic_down[nic] = down;
  }
  p.leaf_up.assign(leaves_, {});
  p.down_to_leaf.assign(static_cast<size_t>(uppers_) * leaves_per_pod_, -1);
  for (int leaf = 0; leaf < leaves_; ++leaf) {
    const int pod = leaf / leaves_per_pod_;
    for (int j = 0; j < leaf_up_; ++j) {
      const int upper = pod * leaf_up_ + j;
      auto [up, down] = cable(End::leaf, leaf, End::upper, upper);
      upper_of_link_[up] = upper;
      p.leaf_up[leaf].push_back(up);
      p.down_to_leaf[static_cast<size_t>(upper) * leaves_per_pod_ + leaf % leaves_per_pod_] = down;
    }
  }
  if (tiers_ == 3) {
    p.agg_up.assign(uppers_, {});
    p.core_down.assign(static_cast<size_t>(cores_) * pods_, -1);
    for (int agg = 0; agg < uppers_; ++agg) {
      const int pod = agg / leaf_up_, j = agg % leaf_up_;
      for (int i = 0; i < core_links_per_agg_; ++i) {
        const int core = j * core_links_per_agg_ + i;  // core group j serves aggregation j
        auto [up, down] = cable(End::upper, agg, End::core, core);
        core_of_link_[up] = core;
        p.agg_up[agg].push_back(up);
        p.core_down[static_cast<size_t>(core) * pods_ + pod] = down;
      }
    }
  }
}

std::string FabricTopology::end_name(End kind, int plane, int index) const {
  // Appended piece by piece: GCC 12 gives a false -Wrestrict for "p" + to_string(...) + ":".
  std::string prefix;
  if (planes_ > 1) {
    prefix = "p";
    prefix += std::to_string(plane);
    prefix += ':';
  }
  switch (kind) {
    case End::nic:
      return prefix + "nic" + std::to_string(index / nics_per_node_) + "." +
             std::to_string(index % nics_per_node_);
    case End::leaf: return prefix + "leaf" + std::to_string(index);
    case End::upper:
      if (tiers_ == 2) return prefix + "spine" + std::to_string(index);
      return prefix + "agg" + std::to_string(index / leaf_up_) + "." +
             std::to_string(index % leaf_up_);
    case End::core: return prefix + "core" + std::to_string(index);
    case End::trunk: return prefix + "trunk" + std::to_string(index);
  }
  return "?";
}

std::string FabricTopology::link_name(int link) const {
  const LinkEnds& e = ends_.at(link);
  return end_name(e.from_kind, e.plane, e.from) + "->" + end_name(e.to_kind, e.plane, e.to);
}

std::string FabricTopology::nic_name(int nic) const { return end_name(End::nic, 0, nic); }

void FabricTopology::fail_links(const FailureSpec& failures) {
  auto fail_cable = [&](int link) {
    links_[link].failed = true;
    if (reverse_[link] >= 0) links_[reverse_[link]].failed = true;
  };
  if (!failures.links.empty()) {
    // Cable names are "A-B" in either order; NIC cables cannot fail (the NIC would be cut off).
    for (const std::string& name : failures.links) {
      bool found = false;
      for (size_t link = 0; link < links_.size() && !found; ++link) {
        const LinkEnds& e = ends_[link];
        if (e.from_kind == End::nic || e.to_kind == End::nic) continue;
        std::string a = end_name(e.from_kind, e.plane, e.from);
        std::string b = end_name(e.to_kind, e.plane, e.to);
        if (name == a + "-" + b) {
          fail_cable(static_cast<int>(link));
          found = true;
        }
      }
      if (!found) {
        invalid("cluster: failures.links: no switch-to-switch cable named '" + name +
                "' (names look like leaf0-spine3, leaf5-agg0.2, agg1.0-core7; see `tpf plan "
                "show-cluster`)");
      }
    }
  }
  if (failures.random_links > 0) {
    std::vector<int> cables;  // upward direction of every switch-to-switch cable still alive
    for (size_t link = 0; link < links_.size(); ++link) {
      const bool upward = upper_of_link_[link] >= 0 || core_of_link_[link] >= 0;
      if (upward && !links_[link].failed) cables.push_back(static_cast<int>(link));
    }
    if (failures.random_links > static_cast<int>(cables.size()) / 2) {
      invalid("cluster: failures.random_links = " + std::to_string(failures.random_links) +
              " is more than half of the " + std::to_string(cables.size()) +
              " switch-to-switch cables still working");
    }
    uint64_t state = failures.seed;
    for (int chosen = 0; chosen < failures.random_links;) {
      int link = cables[split_mix(state) % cables.size()];
      if (links_[link].failed) continue;
      fail_cable(link);
      ++chosen;
    }
  }
}

void FabricTopology::drop_failed_candidates() {
  auto alive = [&](int link) { return link >= 0 && !links_[link].failed; };
  for (Plane& p : plane_links_) {
    for (auto& list : p.leaf_up) std::erase_if(list, [&](int l) { return !alive(l); });
    for (auto& list : p.agg_up) std::erase_if(list, [&](int l) { return !alive(l); });
    for (int& l : p.down_to_leaf) l = alive(l) ? l : -1;
    for (int& l : p.core_down) l = alive(l) ? l : -1;
  }
}

void FabricTopology::build_trunks() {
  auto trunk = [&](int plane, const std::vector<int>& members) {
    double gbps = 0;
    for (int link : members) gbps += link >= 0 ? links_[link].gbps : 0.0;
    int id = add_link(gbps, link_latency_us_, {End::trunk, End::trunk, uint8_t(plane), 0, 0});
    links_[id].trunk = true;
    ends_[id].from = ends_[id].to = id;
    return id;
  };
  for (int plane = 0; plane < planes_; ++plane) {
    Plane& p = plane_links_[plane];
    for (int leaf = 0; leaf < leaves_; ++leaf) {
      p.leaf_up_trunk.push_back(trunk(plane, p.leaf_up[leaf]));
      std::vector<int> down;
      const int pod = leaf / leaves_per_pod_;
      for (int j = 0; j < leaf_up_; ++j) {
        down.push_back(p.down_to_leaf[static_cast<size_t>(pod * leaf_up_ + j) * leaves_per_pod_ +
                                      leaf % leaves_per_pod_]);
      }
      p.leaf_down_trunk.push_back(trunk(plane, down));
    }
    if (tiers_ == 3) {
      for (int pod = 0; pod < pods_; ++pod) {
        std::vector<int> up, down;
        for (int j = 0; j < leaf_up_; ++j) {
          const auto& agg_links = p.agg_up[pod * leaf_up_ + j];
          up.insert(up.end(), agg_links.begin(), agg_links.end());
        }
        for (int core = 0; core < cores_; ++core) {
          down.push_back(p.core_down[static_cast<size_t>(core) * pods_ + pod]);
        }
        p.pod_up_trunk.push_back(trunk(plane, up));
        p.pod_down_trunk.push_back(trunk(plane, down));
      }
    }
  }
}

int FabricTopology::leaf_of(int nic, int /*plane*/) const {
  if (rail_optimized_) {
    const int node = nic / nics_per_node_, rail = nic % nics_per_node_;
    return (node / rail_group_nodes_) * nics_per_node_ + rail;
  }
  return nic / leaf_down_;
}

int FabricTopology::failed_link_count() const {
  return static_cast<int>(
      std::count_if(links_.begin(), links_.end(), [](const FabricLink& l) { return l.failed; }));
}

int FabricTopology::nic_up(int nic, int plane) const { return plane_links_[plane].nic_up[nic]; }
int FabricTopology::nic_down(int nic, int plane) const { return plane_links_[plane].nic_down[nic]; }
const std::vector<int>& FabricTopology::leaf_up_links(int plane, int leaf) const {
  return plane_links_[plane].leaf_up[leaf];
}
int FabricTopology::upper_of_leaf_link(int link) const { return upper_of_link_[link]; }
int FabricTopology::spine_down_to_leaf(int plane, int upper, int leaf) const {
  return plane_links_[plane]
      .down_to_leaf[static_cast<size_t>(upper) * leaves_per_pod_ + leaf % leaves_per_pod_];
}
const std::vector<int>& FabricTopology::agg_up_links(int plane, int agg) const {
  return plane_links_[plane].agg_up[agg];
}
int FabricTopology::core_of_agg_link(int link) const { return core_of_link_[link]; }
int FabricTopology::core_down_to_pod(int plane, int core, int pod) const {
  return plane_links_[plane].core_down[static_cast<size_t>(core) * pods_ + pod];
}
int FabricTopology::leaf_up_trunk(int plane, int leaf) const {
  return plane_links_[plane].leaf_up_trunk[leaf];
}
int FabricTopology::leaf_down_trunk(int plane, int leaf) const {
  return plane_links_[plane].leaf_down_trunk[leaf];
}
int FabricTopology::pod_up_trunk(int plane, int pod) const {
  return plane_links_[plane].pod_up_trunk[pod];
}
int FabricTopology::pod_down_trunk(int plane, int pod) const {
  return plane_links_[plane].pod_down_trunk[pod];
}

std::string FabricTopology::summary() const {
  // "1 NIC", "2 NICs": every count with its noun in the right number.
  auto count = [](int n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::ostringstream out;
  out << tiers_ << "-tier " << (rail_optimized_ ? "rail-optimized " : "")
      << (tiers_ == 2 ? "leaf-spine" : "fat-tree") << ", " << count(planes_, "plane", "planes")
      << ": " << count(nics_, "NIC", "NICs") << ", " << count(leaves_, "leaf", "leaves")
      << " (each with " << leaf_down_ << " ports down, " << leaf_up_ << " up), ";
  if (tiers_ == 2) {
    out << count(uppers_, "spine", "spines");
  } else {
    out << count(pods_, "pod", "pods") << ", " << uppers_ << " aggregation and " << cores_
        << " core switches";
  }
  out << " per plane; " << count(failed_link_count() / 2, "failed cable", "failed cables");
  return out.str();
}

}  // namespace tpf::plan
