// A mesh of communicators over the ranks of a world (e.g. DP x TP, or PP x DP x TP), laid out
// row-major: the LAST dimension is innermost, so its ranks are contiguous in world rank order
// (Megatron-LM puts TP innermost so that TP peers share the fastest links).
#pragma once

#include "tpf/export.h"

#include <string>
#include <utility>
#include <vector>

#include "tpf/comm.h"

namespace TPF_API tpf {

struct MeshDim {
  std::string name;  // e.g. "dp", "tp"
  int size = 1;
};

class DeviceMesh {
 public:
  // Collective over world; the product of the sizes must equal world.size().
  DeviceMesh(const Communicator& world, std::vector<MeshDim> dims);

  // The communicator of this rank's group along a dimension (ranks differing only in that coordinate).
  Communicator& group(const std::string& dim_name);
  Communicator& group(size_t dim_index);
  // This rank's coordinate along each dimension.
  const std::vector<int>& coords() const noexcept { return coords_; }
  int coord(const std::string& dim_name) const;
  const std::vector<MeshDim>& dims() const noexcept { return dims_; }

  // World rank at the given coordinates (row-major, last dimension innermost).
  static int rank_of(const std::vector<MeshDim>& dims, const std::vector<int>& coords);
  static std::vector<int> coords_of(const std::vector<MeshDim>& dims, int rank);

 private:
  size_t index_of(const std::string& dim_name) const;
  std::vector<MeshDim> dims_;
  std::vector<int> coords_;
  std::vector<Communicator> groups_;
};

}  // namespace tpf
