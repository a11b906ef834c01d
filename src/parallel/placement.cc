#include "parallel/placement.h"

#include "tpf/error.h"

namespace tpf {

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::replicate: return "replicate";
    case Kind::shard: return "shard(" + std::to_string(dim_) + ")";
    case Kind::partial: return "partial";
  }
  return "invalid";
}

void require_placement(const ParallelTensor& t, const Placement& wanted, const std::string& who) {
  if (!(t.placement == wanted)) {
    std::string why;
    if (t.placement.kind() == Placement::Kind::partial) {
      why = " (a partial sum must be reduced first: all-reduce or reduce-scatter)";
    }
    throw Error(ErrorCode::invalid_argument, who + ": expects a " + wanted.to_string() +
                                                 " input, got a " + t.placement.to_string() +
                                                 " tensor of local shape " +
                                                 shape_string(t.local.shape()) + why);
  }
}

}  // namespace tpf
