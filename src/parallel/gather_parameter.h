// Whole tensors from the slices the ranks hold (for export, tests and checkpoints of a different
// TP size). Collective: every rank of the group must call it, in the same order.
#pragma once

#include "parallel/parameter.h"
#include "parallel/tp_group.h"

namespace tpf {

// The global tensor whose slices are `local` (p's value or grad, or an optimizer moment) on the
// ranks of tp; every rank receives it.
Tensor gather_global(TpGroup& tp, const Parameter& p, const Tensor& local);

}  // namespace tpf
