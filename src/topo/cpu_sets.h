// hwloc CPU sets as lists of PU OS indexes and as text, for the modules that read hwloc
// (tpf/topology.h, topo/network_devices.h).
#pragma once

#include <hwloc.h>

#include <string>
#include <vector>

namespace tpf::topo {

// The OS indexes of the PUs in `cpuset`, ascending (none for an infinite set).
std::vector<int> pu_os_indices(hwloc_const_cpuset_t cpuset);

// "0-3,8,10-11" for ascending indexes: short enough to print for machines with hundreds of CPUs.
std::string format_ranges(const std::vector<int>& sorted);

}  // namespace tpf::topo
