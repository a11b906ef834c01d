// DeviceMesh: one sub-communicator per mesh dimension, built with Communicator::split.
#include "tpf/mesh.h"

#include <cstdint>
#include <set>

#include "tpf/error.h"

namespace tpf {
namespace {

std::string describe(const std::vector<MeshDim>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += (i ? ", " : "") + dims[i].name + "=" + std::to_string(dims[i].size);
  }
  return s + "]";
}

// Throws unless every size is >= 1, names are non-empty and unique; returns the product.
int64_t validate_dims(const std::vector<MeshDim>& dims) {
  if (dims.empty()) {
    throw Error(ErrorCode::invalid_argument, "DeviceMesh: no dimensions given; pass at least one");
  }
  std::set<std::string> names;
  int64_t product = 1;
  for (const auto& d : dims) {
    if (d.name.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  "DeviceMesh: a dimension has an empty name in " + describe(dims));
    }
    if (!names.insert(d.name).second) {
      throw Error(ErrorCode::invalid_argument,
                  "DeviceMesh: dimension name '" + d.name + "' appears twice in " + describe(dims));
    }
    if (d.size < 1) {
      throw Error(ErrorCode::invalid_argument, "DeviceMesh: dimension '" + d.name + "' has size " +
                                                   std::to_string(d.size) + "; sizes must be >= 1");
    }
    product *= d.size;
    if (product > INT32_MAX) {
      throw Error(ErrorCode::invalid_argument,
                  "DeviceMesh: the product of the sizes " + describe(dims) + " is too large");
    }
  }
  return product;
}

}  // namespace

DeviceMesh::DeviceMesh(const Communicator& world, std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  if (!world.valid()) {
    throw Error(ErrorCode::invalid_argument, "DeviceMesh: the world communicator is invalid");
  }
  // Validation is local and identical on every rank, so all ranks throw before any split.
  const int64_t product = validate_dims(dims_);
  if (product != world.size()) {
    throw Error(ErrorCode::invalid_argument,
                "DeviceMesh: the mesh " + describe(dims_) + " has " + std::to_string(product) +
                    " ranks but the world has " + std::to_string(world.size()) +
                    "; make the product of the sizes equal the world size");
  }
  coords_ = coords_of(dims_, world.rank());
  groups_.reserve(dims_.size());
  for (size_t d = 0; d < dims_.size(); ++d) {
    // Ranks that agree on every other coordinate share a group: color = the row-major index of the
    // other coordinates; key = the coordinate along d, so the group rank equals that coordinate.
    int color = 0;
    for (size_t e = 0; e < dims_.size(); ++e) {
      if (e != d) color = color * dims_[e].size + coords_[e];
    }
    groups_.push_back(world.split(color, coords_[d]));
  }
}

Communicator& DeviceMesh::group(const std::string& dim_name) { return groups_[index_of(dim_name)]; }

Communicator& DeviceMesh::group(size_t dim_index) {
  if (dim_index >= groups_.size()) {
    throw Error(ErrorCode::invalid_argument,
                "DeviceMesh::group: dimension index " + std::to_string(dim_index) +
                    " out of range; the mesh " + describe(dims_) + " has " +
                    std::to_string(dims_.size()) + " dimensions");
  }
  return groups_[dim_index];
}

int DeviceMesh::coord(const std::string& dim_name) const { return coords_[index_of(dim_name)]; }

size_t DeviceMesh::index_of(const std::string& dim_name) const {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == dim_name) return i;
  }
  throw Error(ErrorCode::invalid_argument,
              "DeviceMesh: no dimension named '" + dim_name + "' in " + describe(dims_));
}

int DeviceMesh::rank_of(const std::vector<MeshDim>& dims, const std::vector<int>& coords) {
  validate_dims(dims);
  if (coords.size() != dims.size()) {
    throw Error(ErrorCode::invalid_argument,
                "DeviceMesh::rank_of: " + std::to_string(coords.size()) +
                    " coordinates given for the mesh " + describe(dims) + " of " +
                    std::to_string(dims.size()) + " dimensions");
  }
  int rank = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= dims[i].size) {
      throw Error(ErrorCode::invalid_argument,
                  "DeviceMesh::rank_of: coordinate " + std::to_string(coords[i]) + " along '" +
                      dims[i].name + "' is outside [0, " + std::to_string(dims[i].size) + ")");
    }
    rank = rank * dims[i].size + coords[i];  // row-major: the last dimension is innermost
  }
  return rank;
}

std::vector<int> DeviceMesh::coords_of(const std::vector<MeshDim>& dims, int rank) {
  const int64_t product = validate_dims(dims);
  if (rank < 0 || rank >= product) {
    throw Error(ErrorCode::invalid_argument,
                "DeviceMesh::coords_of: rank " + std::to_string(rank) + " is outside the mesh " +
                    describe(dims) + " of " + std::to_string(product) + " ranks");
  }
  std::vector<int> coords(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    coords[i] = rank % dims[i].size;
    rank /= dims[i].size;
  }
  return coords;
}

}  // namespace tpf
