// Dropout on activations of the parallel layer. The mask of an element is a function of
// (seed, site, step, global element index) only (tensor/counter_rng.h), so TP = 1 and TP = 4
// drop exactly the same elements, and the backward pass recomputes the mask instead of storing it.
#pragma once

#include "parallel/placement.h"
#include "parallel/tp_group.h"
#include "tensor/counter_rng.h"
#include "tensor/kernels.h"

namespace tpf {

// x: [rows, width], replicated or row-sharded (sequence parallelism). Applies in place.
inline void apply_dropout(const TpGroup& tp, ParallelTensor& x, float p, RngKey key) {
  if (p <= 0.0f) return;
  const int64_t first_row = x.placement.kind() == Placement::Kind::shard && x.placement.dim() == 0
                                ? tp.rank() * x.local.dim(0)
                                : 0;
  dropout_in_place(x.local.f32(), x.local.numel(), p, key,
                   static_cast<uint64_t>(first_row * x.local.dim(1)));
}

}  // namespace tpf
