// The shared-memory fabric's link class and its all-reduce choice. The formulas are the generic
// alpha-beta ones of coll/alpha_beta.h, which the planner uses too (one source of truth);
// `tpf plan calibrate` refits these constants from `tpf bench` measurements.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "coll/alpha_beta.h"

namespace tpf::coll {

// Costs of the shared-memory link class. step_us and the rates were fitted with `tpf bench` on the
// development machine (2-core AMD EPYC VM, N = 2: one-shot and two-shot all_reduce of 8 KiB to
// 256 KiB, forced with TPF_ALLREDUCE_ALGO; see docs/fabric.md). step_us_per_excess_rank is the
// fit of `tpf plan calibrate --train-ranks 2,3` on the runs saved in docs/results/calibration
// (11.55 us, from N = 3 on 2 cores; docs/plan.md), rounded: with step_us it makes the N = 3 step
// 12.35 us against 12.3 measured, and the N = 4 one 24.35 against ~26. TPF_SHM_STEP_US,
// TPF_SHM_EXCESS_STEP_US, TPF_SHM_COPY_GBPS and TPF_SHM_REDUCE_GBPS override them (read by
// comm/settings.cc).
struct ShmLinkCost {
  double step_us = 0.35;  // one synchronized step, every rank on its own core
  // Added to a step per rank beyond the cores: a step then waits for the scheduler to run every
  // rank, and the time slices of the ranks without a core add up.
  double step_us_per_excess_rank = 12.0;
  double copy_gbps = 20.0;    // memcpy into / out of shared memory (L2-resident slots)
  double reduce_gbps = 47.0;  // bytes per second the reduction reads from the slots
  // The link class of `nranks` ranks of which `excess_ranks` have no core of their own (ranks on
  // the machine beyond its cores; 0 when every rank has one): alpha = step_us +
  // step_us_per_excess_rank * excess_ranks.
  LinkClass link_class(int nranks, int excess_ranks) const;
};

enum class AllReduceAlgorithm { one_shot, two_shot };
const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm) noexcept;  // "one_shot", ...
std::optional<AllReduceAlgorithm> parse_all_reduce_algorithm(std::string_view name) noexcept;

// Elements per pipeline chunk of the two-shot algorithm for a given slot size.
size_t two_shot_chunk_elems(size_t slot_bytes, size_t elem_bytes, int nranks);

double predict_all_reduce_us(AllReduceAlgorithm algorithm, size_t bytes, int nranks,
                             int excess_ranks, size_t slot_bytes, const ShmLinkCost& cost);

// The cheaper algorithm under `cost` (one-shot only if the message fits one slot), or `forced`
// where it applies (TPF_ALLREDUCE_ALGO).
AllReduceAlgorithm choose_all_reduce(size_t bytes, int nranks, int excess_ranks, size_t slot_bytes,
                                     std::optional<AllReduceAlgorithm> forced,
                                     const ShmLinkCost& cost);

}  // namespace tpf::coll
