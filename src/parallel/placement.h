// Layouts as types: a tensor of the parallel layer says how its global value is spread over the
// ranks of the tensor-parallel group (PyTorch DTensor's placements, Megatron's regions):
//   replicate  every rank holds the whole value;
//   shard(d)   rank r holds the r-th of T equal blocks along dimension d;
//   partial    every rank holds a tensor of the global shape, and the value is their sum.
// Layers state which placements they accept and throw a tpf::Error naming the layer and both
// placements otherwise, e.g. a LayerNorm refuses a partial sum (the norm of a sum is not the sum
// of norms).
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace tpf {

class Placement {
 public:
  enum class Kind { replicate, shard, partial };

  static Placement replicate() { return Placement(Kind::replicate, 0); }
  static Placement shard(int dim) { return Placement(Kind::shard, dim); }
  static Placement partial() { return Placement(Kind::partial, 0); }

  Kind kind() const noexcept { return kind_; }
  int dim() const noexcept { return dim_; }  // meaningful for shard only
  bool operator==(const Placement& other) const noexcept {
    return kind_ == other.kind_ && (kind_ != Kind::shard || dim_ == other.dim_);
  }
  std::string to_string() const;  // "replicate", "shard(0)", "partial"

 private:
  Placement(Kind kind, int dim) : kind_(kind), dim_(dim) {}
  Kind kind_;
  int dim_;
};

// A rank's local part of a global tensor, and how it relates to the whole.
struct ParallelTensor {
  Tensor local;
  Placement placement = Placement::replicate();
};

// Throws tpf::Error(invalid_argument): "<who>: expects <wanted> input, got <actual>".
void require_placement(const ParallelTensor& t, const Placement& wanted, const std::string& who);

}  // namespace tpf
