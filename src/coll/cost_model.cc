#include "coll/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace tpf::coll {
namespace {

constexpr size_t kAlignBytes = 64;

}  // namespace

const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm) noexcept {
  return algorithm == AllReduceAlgorithm::one_shot ? "one_shot" : "two_shot";
}

std::optional<AllReduceAlgorithm> parse_all_reduce_algorithm(std::string_view name) noexcept {
  for (AllReduceAlgorithm a : {AllReduceAlgorithm::one_shot, AllReduceAlgorithm::two_shot}) {
    if (name == all_reduce_algorithm_name(a)) return a;
  }
  return std::nullopt;
}

size_t two_shot_chunk_elems(size_t slot_bytes, size_t elem_bytes, int nranks) {
  // A slot holds the chunk's inputs plus this rank's reduced portion (chunk / n), and portions
  // start on cache lines: chunk = n * portion, with (n + 1) * portion <= slot.
  size_t align_elems = std::max<size_t>(1, kAlignBytes / elem_bytes);
  size_t n = static_cast<size_t>(nranks);
  size_t portion = slot_bytes / elem_bytes / (n + 1) / align_elems * align_elems;
  return std::max(portion, align_elems) * n;
}

LinkClass ShmLinkCost::link_class(int /*nranks*/, int excess_ranks) const {
  LinkClass link;
  link.name = "shm";
  link.alpha_us = step_us + step_us_per_excess_rank * std::max(0, excess_ranks);
  link.port_gbps = 0;  // peers' slots are read in place: the reduce / copy rates bound it
  link.stage_gbps = copy_gbps;
  link.reduce_gbps = reduce_gbps;
  return link;
}

double predict_all_reduce_us(AllReduceAlgorithm algorithm, size_t bytes, int nranks,
                             int excess_ranks, size_t slot_bytes, const ShmLinkCost& cost) {
  const LinkClass link = cost.link_class(nranks, excess_ranks);
  const double b = static_cast<double>(bytes);
  if (algorithm == AllReduceAlgorithm::one_shot) {
    return *predict_us(Collective::all_reduce, Algorithm::one_shot, b, nranks, link);
  }
  const double chunk_bytes = static_cast<double>(two_shot_chunk_elems(slot_bytes, 1, nranks));
  const double chunks = std::max(1.0, std::ceil(b / chunk_bytes));
  return *predict_us(Collective::all_reduce, Algorithm::two_shot, b, nranks, link, chunks);
}

AllReduceAlgorithm choose_all_reduce(size_t bytes, int nranks, int excess_ranks, size_t slot_bytes,
                                     std::optional<AllReduceAlgorithm> forced,
                                     const ShmLinkCost& cost) {
  const bool fits_one_slot = bytes <= slot_bytes;
  if (forced == AllReduceAlgorithm::two_shot) return AllReduceAlgorithm::two_shot;
  if (forced == AllReduceAlgorithm::one_shot && fits_one_slot) return AllReduceAlgorithm::one_shot;
  if (!fits_one_slot || nranks == 1) {
    return nranks == 1 ? AllReduceAlgorithm::one_shot : AllReduceAlgorithm::two_shot;
  }
  auto predict = [&](AllReduceAlgorithm algorithm) {
    return predict_all_reduce_us(algorithm, bytes, nranks, excess_ranks, slot_bytes, cost);
  };
  return predict(AllReduceAlgorithm::one_shot) <= predict(AllReduceAlgorithm::two_shot)
             ? AllReduceAlgorithm::one_shot
             : AllReduceAlgorithm::two_shot;
}

}  // namespace tpf::coll
