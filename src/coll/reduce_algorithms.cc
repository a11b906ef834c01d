// all_reduce, reduce and reduce_scatter over the in-memory fabric.
#include <algorithm>
#include <cstring>
#include <string>

#include "coll/algorithms.h"
#include "coll/cost_model.h"
#include "coll/piecewise.h"
#include "coll/reduce_kernels.h"
#include "coll/source_list.h"
#include "tpf/error.h"

namespace tpf::coll {
namespace {

size_t align_up(size_t value, size_t to) { return (value + to - 1) / to * to; }

// Rank r's portion [begin, end) of a chunk of `len` elements: cache-line aligned pieces, so each
// rank reduces its own lines and the last ranks may get less (or nothing).
struct Portion {
  size_t begin, end;
};
Portion portion_of(size_t len, int nranks, int rank, size_t elem_bytes) {
  size_t align_elems = std::max<size_t>(1, kPieceAlignBytes / elem_bytes);
  size_t piece = align_up((len + nranks - 1) / nranks, align_elems);
  size_t begin = std::min(len, piece * static_cast<size_t>(rank));
  return {begin, std::min(len, begin + piece)};
}

}  // namespace

void all_reduce_one_shot(transport::ShmFabric& fabric, const OpDesc& desc,
                         const transport::Fingerprint& fp, const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  const bool deliver = desc.kind == OpKind::all_reduce || me == desc.root;
  if (n == 1) {  // nothing to exchange; the message may be larger than a slot
    fabric.post_and_wait_all(fabric.begin_step(), fp, ctx);
    if (bytes > 0) reduce_n(desc.dtype, desc.op, desc.recv, &desc.send, 1, desc.count);
    return;
  }
  uint64_t step = fabric.begin_step();
  if (bytes > 0) std::memcpy(fabric.slot(me, step), desc.send, bytes);
  fabric.post_and_wait_all(step, fp, ctx);
  if (!deliver || bytes == 0) return;
  SourceList srcs(n);
  for (int p = 0; p < n; ++p) srcs[p] = fabric.slot(p, step);
  reduce_n(desc.dtype, desc.op, desc.recv, srcs.data(), n, desc.count);
}

void all_reduce_two_shot(transport::ShmFabric& fabric, const OpDesc& desc, bool root_only,
                         const transport::Fingerprint& fp, const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t chunk = two_shot_chunk_elems(fabric.slot_bytes(), esize, n);
  const size_t result_offset = chunk * esize;  // where a slot keeps this rank's reduced portion
  const size_t chunks = (desc.count + chunk - 1) / chunk;
  const bool deliver = !root_only || me == desc.root;
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  SourceList srcs(n);

  // Step k copies in chunk k and, in its read phase, reduces this rank's portion of chunk k into
  // the next slot; step k + 1 then copies every peer's reduced portion of chunk k out. So the
  // pipeline takes chunks + 1 steps and reduction of chunk k overlaps the gather of chunk k - 1.
  for (size_t k = 0; k <= std::max<size_t>(chunks, 1); ++k) {
    if (chunks == 0 && k == 1) break;  // count 0: a single step carries the fingerprint
    uint64_t step = fabric.begin_step();
    const bool has_input = k < chunks;
    const size_t base = k * chunk;
    const size_t len = has_input ? std::min(chunk, desc.count - base) : 0;
    const Portion own = portion_of(len, n, me, esize);
    if (len > 0) {  // stage the portions the peers reduce; this rank reads its own from `send`
      std::byte* slot = fabric.slot(me, step);
      std::memcpy(slot, send + base * esize, own.begin * esize);
      std::memcpy(slot + own.end * esize, send + (base + own.end) * esize, (len - own.end) * esize);
    }
    fabric.post_and_wait_all(step, fp, ctx);

    if (k > 0 && deliver) {  // gather the reduced portions of chunk k - 1
      const size_t prev_base = (k - 1) * chunk;
      const size_t prev_len = std::min(chunk, desc.count - prev_base);
      for (int p = 0; p < n; ++p) {
        if (p == me) continue;  // copied into recv when it was reduced
        Portion part = portion_of(prev_len, n, p, esize);
        if (part.end > part.begin) {
          std::memcpy(recv + (prev_base + part.begin) * esize, fabric.slot(p, step) + result_offset,
                      (part.end - part.begin) * esize);
        }
      }
    }
    if (len > 0) {  // reduce this rank's portion of chunk k into the next slot
      const Portion part = own;
      if (part.end > part.begin) {
        // The result goes to the slot, never to `send`, so reading this rank's input in place is
        // safe even when send == recv.
        for (int p = 0; p < n; ++p) srcs[p] = fabric.slot(p, step) + part.begin * esize;
        srcs[me] = send + (base + part.begin) * esize;
        std::byte* result = fabric.slot(me, step + 1) + result_offset;
        reduce_n(desc.dtype, desc.op, result, srcs.data(), n, part.end - part.begin);
        if (deliver) {
          std::memcpy(recv + (base + part.begin) * esize, result, (part.end - part.begin) * esize);
        }
      }
    }
  }
}

void reduce_scatter(transport::ShmFabric& fabric, const OpDesc& desc,
                    const transport::Fingerprint& fp, const transport::WaitContext& ctx) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t piece = piece_elems(fabric.slot_bytes(), esize, n);  // one piece of every block
  const size_t count = desc.count;                                  // per-rank block
  const auto* send = static_cast<const std::byte*>(desc.send);
  auto* recv = static_cast<std::byte*>(desc.recv);
  SourceList srcs(n);
  run_piecewise(
      fabric, count, piece, fp, ctx,
      [&](uint64_t step, size_t base, size_t len) {
        // Own block too: the reduction reads every input from the slots, so an in-place call
        // (recv inside send) never overwrites an input it still needs.
        std::byte* mine = fabric.slot(me, step);
        for (int b = 0; b < n; ++b) {
          std::memcpy(mine + b * piece * esize, send + (b * count + base) * esize, len * esize);
        }
      },
      [&](uint64_t step, size_t base, size_t len) {
        for (int p = 0; p < n; ++p) srcs[p] = fabric.slot(p, step) + me * piece * esize;
        reduce_n(desc.dtype, desc.op, recv + base * esize, srcs.data(), n, len);
      });
}

void run_operation(transport::ShmFabric& fabric, const OpDesc& desc, uint64_t sequence,
                   const transport::WaitContext& ctx, const CollectiveTuning& tuning) {
  run_operation(fabric, desc, collective_fingerprint(desc, sequence), ctx, tuning);
}

void run_operation(transport::ShmFabric& fabric, const OpDesc& desc,
                   const transport::Fingerprint& fp, const transport::WaitContext& ctx,
                   const CollectiveTuning& tuning) {
  if (fits_eager(desc, fabric.size(), tuning.eager_max_bytes)) {
    return run_eager(fabric, desc, fp, ctx);
  }
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  switch (desc.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce: {
      auto algorithm = choose_all_reduce(bytes, fabric.size(), fabric.excess_ranks(),
                                         fabric.slot_bytes(), tuning.forced_all_reduce,
                                         tuning.link_cost);
      if (algorithm == AllReduceAlgorithm::one_shot) {
        all_reduce_one_shot(fabric, desc, fp, ctx);
      } else {
        all_reduce_two_shot(fabric, desc, desc.kind == OpKind::reduce, fp, ctx);
      }
      return;
    }
    case OpKind::reduce_scatter: return reduce_scatter(fabric, desc, fp, ctx);
    case OpKind::broadcast: return broadcast(fabric, desc, fp, ctx);
    case OpKind::all_gather: return all_gather(fabric, desc, fp, ctx);
    case OpKind::all_to_all: return all_to_all(fabric, desc, fp, ctx);
    case OpKind::gather: return gather(fabric, desc, fp, ctx);
    case OpKind::scatter: return scatter(fabric, desc, fp, ctx);
    case OpKind::barrier: return barrier(fabric, fp, ctx);
    case OpKind::send:
    case OpKind::recv: break;
  }
  throw Error(ErrorCode::internal, std::string(op_kind_name(desc.kind)) +
                                       " is not a collective: it goes through P2pTransfer");
}

}  // namespace tpf::coll
