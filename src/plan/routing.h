// Routing NIC-to-NIC transfers over a FabricTopology: per-flow ECMP hashing (seeded, per switch,
// so collisions and polarisation happen), a transfer split over several queue pairs, packet
// spraying (a fluid split over all surviving paths) and adaptive routing (each sub-flow placed on
// the least loaded of its equal-cost choices).
#pragma once

#include <vector>

#include "plan/cluster.h"
#include "plan/fabric_topology.h"
#include "plan/max_min.h"

namespace tpf::plan {

struct Transfer {
  int src_nic = 0;
  int dst_nic = 0;
  double bytes = 0;
};

// One routed piece of a transfer: a path (link ids) and its share of the bytes.
struct SubFlow {
  int transfer = 0;
  PathFlow path;
};

// Splits each transfer over planes and queue pairs and routes every piece. Deterministic for a
// given routing seed. Throws Error(invalid_argument) naming the pair if failures cut a destination
// off.
std::vector<SubFlow> route_transfers(const FabricTopology& topology, const RoutingSpec& routing,
                                     const std::vector<Transfer>& transfers);

}  // namespace tpf::plan
