// Small collectives over the fabric's eager messages (shm_fabric.h): each rank writes its
// contribution once into its outbox and reads what it needs from the peers' outboxes. No step
// synchronizes the ranks, so a message costs one cache miss per line to its readers, and a
// broadcast's or scatter's root does not wait for anyone (a scatter's root posts every block in
// one message, of which each rank reads its own).
#include <algorithm>
#include <cstring>
#include <span>

#include "coll/algorithms.h"
#include "coll/reduce_kernels.h"
#include "coll/source_list.h"

namespace tpf::coll {
namespace {

// Bytes of the eager message each rank posts for `desc`.
size_t message_bytes(const OpDesc& desc, int nranks) {
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  const bool every_block = desc.kind == OpKind::reduce_scatter || desc.kind == OpKind::scatter;
  return every_block ? bytes * static_cast<size_t>(nranks) : bytes;
}

// Reduces block `block` (of `count` elements) of every rank's message, in rank order, into dst.
// The contributions are gathered first, so dst may overlap this rank's input (in-place calls).
void reduce_blocks(transport::ShmFabric& fabric, const OpDesc& desc, size_t block, void* dst) {
  const int n = fabric.size(), me = fabric.rank();
  const size_t bytes = desc.count * dtype_size(desc.dtype);
  std::byte* staged = fabric.scratch(bytes * static_cast<size_t>(n));
  SourceList list(n);
  for (int p = 0; p < n; ++p) {
    std::byte* to = staged + static_cast<size_t>(p) * bytes;
    if (p == me) {
      std::memcpy(to, static_cast<const std::byte*>(desc.send) + block * bytes, bytes);
    } else {
      fabric.eager_read(p, block * bytes, bytes, to);
    }
    list[p] = to;
  }
  reduce_n(desc.dtype, desc.op, dst, list.data(), n, desc.count);
}

constexpr size_t kEagerAllReduceBytes = 256;
// A scatter's root posts every block: measured at N = 2 (us per call, eager / staged), 128 B 0.21 /
// 0.35, 256 B 0.34-0.35 / 0.35-0.49, 512 B 0.60-0.69 / 0.38 (a 512 B broadcast took 0.63-0.65
// eagerly then too, against 1 KiB staged at 0.39; docs/fabric.md, "Eager messages").
constexpr size_t kEagerScatterBytes = 256;

}  // namespace

bool fits_eager(const OpDesc& desc, int nranks, size_t eager_max_bytes) {
  if (nranks < 2) return false;
  const size_t bytes = message_bytes(desc, nranks);
  // Where every rank waits for every other anyway, eager messages win only while they are short;
  // beyond that the staged path reads contiguous slots as fast. Measured at N = 2 on the 2-core
  // EPYC VM (us per call, eager / staged): all_reduce 128 B 0.56 / 0.65, 1 KiB 0.84 / 0.79;
  // all_gather 128 B 0.53 / 0.46; reduce_scatter 128 B 0.55 / 0.52; broadcast 512 B 0.25 / 0.42.
  size_t limit = 0;
  switch (desc.kind) {
    case OpKind::broadcast: limit = transport::ShmFabric::kEagerCapacity; break;
    case OpKind::scatter: limit = kEagerScatterBytes; break;
    case OpKind::all_reduce: limit = kEagerAllReduceBytes; break;
    case OpKind::all_gather:
    case OpKind::reduce_scatter: limit = transport::ShmFabric::kEagerOneLineBytes; break;
    default: return false;
  }
  return bytes <= std::min(limit, eager_max_bytes);
}

void run_eager(transport::ShmFabric& fabric, const OpDesc& desc, const transport::Fingerprint& fp,
               const transport::WaitContext& ctx) {
  const int me = fabric.rank();
  const size_t esize = dtype_size(desc.dtype);
  const size_t bytes = message_bytes(desc, fabric.size());
  if (desc.kind == OpKind::broadcast || desc.kind == OpKind::scatter) {
    const std::span<const int> root(&desc.root, 1);
    // What this rank takes of the root's message: all of it, or (scatter) its own block.
    const bool scatter = desc.kind == OpKind::scatter;
    const size_t taken = scatter ? desc.count * esize : bytes;
    const size_t offset = scatter ? static_cast<size_t>(me) * taken : 0;
    if (me == desc.root) {
      fabric.eager_post(fp, desc.send, bytes, ctx);
      const auto* own = static_cast<const std::byte*>(desc.send) + offset;
      if (desc.recv != own && taken > 0) std::memmove(desc.recv, own, taken);
    } else {
      fabric.eager_wait(root, fp, bytes, ctx);
      fabric.eager_read(desc.root, offset, taken, desc.recv);
      fabric.eager_release(root);
    }
    return;
  }
  fabric.eager_post(fp, desc.send, bytes, ctx);
  fabric.eager_wait(fabric.peers(), fp, bytes, ctx);
  if (bytes > 0) {
    switch (desc.kind) {
      case OpKind::all_reduce: reduce_blocks(fabric, desc, 0, desc.recv); break;
      case OpKind::reduce_scatter:
        reduce_blocks(fabric, desc, static_cast<size_t>(me), desc.recv);
        break;
      default: {  // all_gather
        auto* recv = static_cast<std::byte*>(desc.recv);
        for (int p = 0; p < fabric.size(); ++p) {
          std::byte* to = recv + static_cast<size_t>(p) * desc.count * esize;
          if (p != me) {
            fabric.eager_read(p, 0, bytes, to);
          } else if (to != desc.send) {
            std::memmove(to, desc.send, bytes);
          }
        }
      }
    }
  }
  fabric.eager_release(fabric.peers());
}

}  // namespace tpf::coll
