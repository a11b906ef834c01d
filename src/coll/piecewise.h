// The loop shared by the staged collectives: one fabric step per piece of the message.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transport/shm_fabric.h"

namespace tpf::coll {

inline constexpr size_t kPieceAlignBytes = 64;

// Elements per piece when a slot is divided into `pieces` cache-line aligned pieces.
inline size_t piece_elems(size_t slot_bytes, size_t esize, int pieces) {
  size_t align_elems = std::max<size_t>(1, kPieceAlignBytes / esize);
  size_t elems = slot_bytes / esize / static_cast<size_t>(pieces) / align_elems * align_elems;
  return std::max(elems, align_elems);
}

// For each piece [base, base + len) of `count` elements: stage(step, base, len) fills this rank's
// slot, the step synchronizes (and checks fingerprints), consume(step, base, len) reads the peers'
// slots. A zero count still takes one step, so its fingerprint is checked like any other.
template <class Stage, class Consume>
void run_piecewise(transport::ShmFabric& fabric, size_t count, size_t piece,
                   const transport::Fingerprint& fp, const transport::WaitContext& ctx,
                   Stage&& stage, Consume&& consume) {
  const size_t steps = std::max<size_t>(1, (count + piece - 1) / piece);
  for (size_t k = 0; k < steps; ++k) {
    const uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < count ? std::min(piece, count - base) : 0;
    if (len > 0) stage(step, base, len);
    fabric.post_and_wait_all(step, fp, ctx);
    if (len > 0) consume(step, base, len);
  }
}

}  // namespace tpf::coll
