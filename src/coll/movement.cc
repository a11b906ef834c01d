// Collectives that move data without reducing it: broadcast, all_gather, all_to_all, gather,
// scatter, barrier. Each step every rank stages a piece in its own slot; after the step's
// synchronization the consumers copy straight from the producers' slots into their output.
#include <algorithm>
#include <cstring>

#include "coll/algorithms.h"

namespace tpf::coll {
namespace {

constexpr size_t kAlignBytes = 64;

// Elements per piece when a slot is divided into `pieces` cache-line aligned pieces.
size_t piece_elems(size_t slot_bytes, size_t esize, int pieces) {
  size_t align_elems = std::max<size_t>(1, kAlignBytes / esize);
  size_t elems = slot_bytes / esize / static_cast<size_t>(pieces) / align_elems * align_elems;
  return std::max(elems, align_elems);
}

size_t steps_for(size_t count, size_t piece) { return std::max<size_t>(1, (count + piece - 1) / piece); }

// Copies `len` elements unless source and destination are the same (in-place calls).
void copy_elems(void* dst, const void* src, size_t len, size_t esize) {
  if (len > 0 && dst != src) std::memmove(dst, src, len * esize);
}

}  // namespace

void broadcast(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
               const transport::WaitContext& ctx) {
  const int me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, 1);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  for (size_t k = 0, steps = steps_for(desc.count, piece); k < steps; ++k) {
    uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < desc.count ? std::min(piece, desc.count - base) : 0;
    if (me == desc.root && len > 0) std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
    fabric.post_and_wait_all(step, fp, ctx);
    if (len == 0) continue;
    if (me != desc.root) {
      std::memcpy(recv + base * esize, fabric.slot(desc.root, step), len * esize);
    } else {  // the root's own copy overlaps the peers' reads of this chunk
      copy_elems(recv + base * esize, send + base * esize, len, esize);
    }
  }
}

void all_gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, 1);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  for (size_t k = 0, steps = steps_for(desc.count, piece); k < steps; ++k) {
    uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < desc.count ? std::min(piece, desc.count - base) : 0;
    if (len > 0) std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
    fabric.post_and_wait_all(step, fp, ctx);
    if (len == 0) continue;
    for (int p = 0; p < n; ++p) {
      std::byte* dst = recv + (p * desc.count + base) * esize;
      if (p == me) {
        copy_elems(dst, send + base * esize, len, esize);
      } else {
        std::memcpy(dst, fabric.slot(p, step), len * esize);
      }
    }
  }
}

void all_to_all(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, n);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  for (size_t k = 0, steps = steps_for(desc.count, piece); k < steps; ++k) {
    uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < desc.count ? std::min(piece, desc.count - base) : 0;
    std::byte* mine = fabric.slot(me, step);
    // Every block goes through the slot, so an in-place call (send == recv) cannot overwrite a
    // block before it was staged.
    for (int b = 0; b < n && len > 0; ++b) {
      std::memcpy(mine + b * piece * esize, send + (b * desc.count + base) * esize, len * esize);
    }
    fabric.post_and_wait_all(step, fp, ctx);
    for (int p = 0; p < n && len > 0; ++p) {
      std::memcpy(recv + (p * desc.count + base) * esize,
                  fabric.slot(p, step) + me * piece * esize, len * esize);
    }
  }
}

void gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
            const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, 1);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  for (size_t k = 0, steps = steps_for(desc.count, piece); k < steps; ++k) {
    uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < desc.count ? std::min(piece, desc.count - base) : 0;
    if (me != desc.root && len > 0) std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
    fabric.post_and_wait_all(step, fp, ctx);
    if (me != desc.root || len == 0) continue;
    for (int p = 0; p < n; ++p) {
      std::byte* dst = recv + (p * desc.count + base) * esize;
      if (p == me) {
        copy_elems(dst, send + base * esize, len, esize);
      } else {
        std::memcpy(dst, fabric.slot(p, step), len * esize);
      }
    }
  }
}

void scatter(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, n);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  for (size_t k = 0, steps = steps_for(desc.count, piece); k < steps; ++k) {
    uint64_t step = fabric.begin_step();
    const size_t base = k * piece;
    const size_t len = base < desc.count ? std::min(piece, desc.count - base) : 0;
    if (me == desc.root) {
      std::byte* mine = fabric.slot(me, step);
      for (int b = 0; b < n && len > 0; ++b) {
        if (b == me) continue;
        std::memcpy(mine + b * piece * esize, send + (b * desc.count + base) * esize, len * esize);
      }
    }
    fabric.post_and_wait_all(step, fp, ctx);
    if (len == 0) continue;
    if (me != desc.root) {
      std::memcpy(recv + base * esize, fabric.slot(desc.root, step) + me * piece * esize,
                  len * esize);
    } else {
      copy_elems(recv + base * esize, send + (me * desc.count + base) * esize, len, esize);
    }
  }
}

void barrier(transport::ShmFabric& fabric, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx) {
  fabric.post_and_wait_all(fabric.begin_step(), fp, ctx);
}

}  // namespace tpf::coll
