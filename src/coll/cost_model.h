// The shared-memory fabric's link class and its all-reduce choice. The formulas are the generic
// alpha-beta ones of coll/alpha_beta.h, which the planner uses too (one source of truth);
// `tpf plan calibrate` refits these constants from `tpf bench` measurements.
#pragma once

#include <cstddef>

#include "coll/alpha_beta.h"

namespace tpf::coll {

// Costs of the shared-memory link class, fitted with `tpf bench` on the development machine (2-core
// AMD EPYC VM, N = 2: one-shot and two-shot all_reduce of 8 KiB to 256 KiB, forced with
// TPF_ALLREDUCE_ALGO; see docs/fabric.md): TPF_SHM_STEP_US, TPF_SHM_COPY_GBPS, TPF_SHM_REDUCE_GBPS
// override them.
struct ShmLinkCost {
  double step_us = 0.35;  // one synchronized step, every rank on its own core
  double oversubscribed_step_us_per_rank = 10.0;  // with more ranks than cores: scheduler-bound
  double copy_gbps = 20.0;    // memcpy into / out of shared memory (L2-resident slots)
  double reduce_gbps = 47.0;  // bytes per second the reduction reads from the slots
  static ShmLinkCost from_env();
  // The link class of `nranks` ranks (the step cost grows with ranks when they outnumber cores).
  LinkClass link_class(int nranks, bool oversubscribed) const;
};

enum class AllReduceAlgorithm { one_shot, two_shot };

// Elements per pipeline chunk of the two-shot algorithm for a given slot size.
size_t two_shot_chunk_elems(size_t slot_bytes, size_t elem_bytes, int nranks);

double predict_all_reduce_us(AllReduceAlgorithm algorithm, size_t bytes, int nranks,
                             bool oversubscribed, size_t slot_bytes, const ShmLinkCost& cost);

// The cheaper algorithm (one-shot only if the message fits one slot). TPF_ALLREDUCE_ALGO=one_shot
// or two_shot forces one (where it applies).
AllReduceAlgorithm choose_all_reduce(size_t bytes, int nranks, bool oversubscribed,
                                     size_t slot_bytes);

}  // namespace tpf::coll
