// send / recv through the per-pair mailboxes of the fabric. A send completes once its last chunk
// is staged (the mailbox holds two chunks), so small sends do not wait for the receiver.
#include <algorithm>
#include <cstring>

#include "coll/algorithms.h"
#include "tpf/error.h"

namespace tpf::coll {
namespace {

size_t chunk_count(size_t count, size_t chunk_elems) {
  return std::max<size_t>(1, (count + chunk_elems - 1) / chunk_elems);
}

}  // namespace

void send(transport::ShmFabric& fabric, const OpDesc& desc, const transport::WaitContext& ctx) {
  const size_t esize = dtype_size(desc.dtype);
  const size_t chunk_elems = std::max<size_t>(1, fabric.p2p_chunk_bytes() / esize);
  const auto* data = static_cast<const std::byte*>(desc.send);
  const size_t chunks = chunk_count(desc.count, chunk_elems);
  for (size_t c = 0; c < chunks; ++c) {
    uint64_t k = fabric.next_send_chunk(desc.peer);
    std::byte* slot = fabric.acquire_send_slot(desc.peer, k, ctx);
    const size_t base = c * chunk_elems;
    const size_t len = base < desc.count ? std::min(chunk_elems, desc.count - base) : 0;
    if (len > 0) std::memcpy(slot, data + base * esize, len * esize);
    fabric.post_send(desc.peer, k, message_fingerprint(desc.dtype, desc.count, c));
  }
}

void recv(transport::ShmFabric& fabric, const OpDesc& desc, const transport::WaitContext& ctx) {
  const size_t esize = dtype_size(desc.dtype);
  const size_t chunk_elems = std::max<size_t>(1, fabric.p2p_chunk_bytes() / esize);
  auto* data = static_cast<std::byte*>(desc.recv);
  const size_t chunks = chunk_count(desc.count, chunk_elems);
  for (size_t c = 0; c < chunks; ++c) {
    uint64_t k = fabric.next_recv_chunk(desc.peer);
    transport::Fingerprint theirs;
    const std::byte* slot = fabric.wait_recv(desc.peer, k, &theirs, ctx);
    const transport::Fingerprint expected = message_fingerprint(desc.dtype, desc.count, c);
    if (!(theirs == expected)) {
      throw Error(ErrorCode::mismatch,
                  ctx.op_label() + ": rank " + std::to_string(fabric.rank()) + " called recv(count=" +
                      std::to_string(desc.count) + ", dtype=" + dtype_name(desc.dtype) +
                      ") from rank " + std::to_string(desc.peer) + ", which called " +
                      describe_fingerprint(theirs));
    }
    const size_t base = c * chunk_elems;
    const size_t len = base < desc.count ? std::min(chunk_elems, desc.count - base) : 0;
    if (len > 0) std::memcpy(data + base * esize, slot, len * esize);
    fabric.release_recv(desc.peer, k);
  }
}

}  // namespace tpf::coll
