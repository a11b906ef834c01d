// Collectives that move data without reducing it: broadcast, all_gather, all_to_all, gather,
// scatter, barrier. Each step every producer stages a piece in its own slot; after the step's
// synchronization the consumers copy straight from the producers' slots into their output.
#include <algorithm>
#include <cstring>

#include "coll/algorithms.h"
#include "coll/piecewise.h"

namespace tpf::coll {
namespace {

// Copies `len` elements unless source and destination are the same (in-place calls).
void copy_elems(std::byte* dst, const std::byte* src, size_t len, size_t esize) {
  if (len > 0 && dst != src) std::memmove(dst, src, len * esize);
}

// Copies piece [base, base + len) of every rank's block into recv: the peers' from their slots,
// this rank's own from its send buffer.
void collect_blocks(const transport::ShmFabric& fabric, uint64_t step, const std::byte* send,
                    std::byte* recv, size_t block, size_t base, size_t len, size_t esize) {
  for (int p = 0; p < fabric.size(); ++p) {
    std::byte* dst = recv + (p * block + base) * esize;
    if (p == fabric.rank()) {
      copy_elems(dst, send + base * esize, len, esize);
    } else {
      std::memcpy(dst, fabric.slot(p, step), len * esize);
    }
  }
}

}  // namespace

void broadcast(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
               const transport::WaitContext& ctx) {
  const int me = fabric.rank();
  const bool root = me == desc.root;
  const size_t esize = dtype_size(desc.dtype);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  run_piecewise(
      fabric, desc.count, piece_elems(fabric.slot_bytes(), esize, 1), fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        if (root) std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
      },
      [&](uint64_t step, size_t base, size_t len) {
        if (!root) {
          std::memcpy(recv + base * esize, fabric.slot(desc.root, step), len * esize);
        } else {  // the root's own copy overlaps the peers' reads of this piece
          copy_elems(recv + base * esize, send + base * esize, len, esize);
        }
      });
}

void all_gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx) {
  const int me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  run_piecewise(
      fabric, desc.count, piece_elems(fabric.slot_bytes(), esize, 1), fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
      },
      [&](uint64_t step, size_t base, size_t len) {
        collect_blocks(fabric, step, send, recv, desc.count, base, len, esize);
      });
}

void all_to_all(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
                const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, n);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  run_piecewise(
      fabric, desc.count, piece, fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        // Every block goes through the slot, so an in-place call (send == recv) cannot overwrite
        // a block before it was staged.
        std::byte* mine = fabric.slot(me, step);
        for (int b = 0; b < n; ++b) {
          std::memcpy(mine + b * piece * esize, send + (b * desc.count + base) * esize, len * esize);
        }
      },
      [&](uint64_t step, size_t base, size_t len) {
        for (int p = 0; p < n; ++p) {
          std::memcpy(recv + (p * desc.count + base) * esize,
                      fabric.slot(p, step) + me * piece * esize, len * esize);
        }
      });
}

void gather(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
            const transport::WaitContext& ctx) {
  const int me = fabric.rank();
  const bool root = me == desc.root;
  const size_t esize = dtype_size(desc.dtype);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  run_piecewise(
      fabric, desc.count, piece_elems(fabric.slot_bytes(), esize, 1), fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        if (!root) std::memcpy(fabric.slot(me, step), send + base * esize, len * esize);
      },
      [&](uint64_t step, size_t base, size_t len) {
        if (root) collect_blocks(fabric, step, send, recv, desc.count, base, len, esize);
      });
}

void scatter(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const bool root = me == desc.root;
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, n);
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  run_piecewise(
      fabric, desc.count, piece, fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        if (!root) return;
        std::byte* mine = fabric.slot(me, step);
        for (int b = 0; b < n; ++b) {
          if (b == me) continue;
          std::memcpy(mine + b * piece * esize, send + (b * desc.count + base) * esize, len * esize);
        }
      },
      [&](uint64_t step, size_t base, size_t len) {
        if (!root) {
          std::memcpy(recv + base * esize, fabric.slot(desc.root, step) + me * piece * esize,
                      len * esize);
        } else {
          copy_elems(recv + base * esize, send + (me * desc.count + base) * esize, len, esize);
        }
      });
}

void barrier(transport::ShmFabric& fabric, const transport::Fingerprint& fp,
             const transport::WaitContext& ctx) {
  fabric.post_and_wait_all(fabric.begin_step(), fp, ctx);
}

}  // namespace tpf::coll
