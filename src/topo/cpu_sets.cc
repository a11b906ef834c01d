#include "topo/cpu_sets.h"

#include <sstream>

namespace tpf::topo {

std::vector<int> pu_os_indices(hwloc_const_cpuset_t cpuset) {
  std::vector<int> out;
  if (cpuset == nullptr || hwloc_bitmap_weight(cpuset) < 0) return out;
  for (int i = hwloc_bitmap_first(cpuset); i >= 0; i = hwloc_bitmap_next(cpuset, i)) {
    out.push_back(i);
  }
  return out;
}

std::string format_ranges(const std::vector<int>& sorted) {
  std::ostringstream out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (i > 0) out << ',';
    out << sorted[i];
    if (j > i) out << '-' << sorted[j];
    i = j + 1;
  }
  return out.str();
}

}  // namespace tpf::topo
