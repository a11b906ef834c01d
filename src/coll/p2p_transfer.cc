#include "coll/p2p_transfer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "tpf/error.h"

namespace tpf::coll {

P2pTransfer::P2pTransfer(const OpDesc& desc, size_t chunk_bytes)
    : desc_(desc),
      esize_(dtype_size(desc.dtype)),
      chunk_elems_(std::max<size_t>(1, chunk_bytes / esize_)),
      chunks_(std::max<size_t>(1, (desc.count + chunk_elems_ - 1) / chunk_elems_)) {}

bool P2pTransfer::ready(const transport::ShmFabric& fabric) const noexcept {
  if (next_chunk_ == chunks_) return true;
  if (desc_.kind == OpKind::send) return fabric.try_send_slot(desc_.peer) != nullptr;
  transport::Fingerprint ignored;
  return fabric.try_recv(desc_.peer, &ignored) != nullptr;
}

bool P2pTransfer::advance(transport::ShmFabric& fabric, const transport::WaitContext& ctx) {
  const int peer = desc_.peer;
  while (next_chunk_ < chunks_) {
    const size_t base = next_chunk_ * chunk_elems_;
    const size_t len = base < desc_.count ? std::min(chunk_elems_, desc_.count - base) : 0;
    const transport::Fingerprint fp = message_fingerprint(desc_.dtype, desc_.count, next_chunk_);
    if (desc_.kind == OpKind::send) {
      std::byte* slot = fabric.try_send_slot(peer);
      if (slot == nullptr) return false;
      if (len > 0) {
        std::memcpy(slot, static_cast<const std::byte*>(desc_.send) + base * esize_, len * esize_);
      }
      fabric.post_send(peer, fp);
    } else {
      transport::Fingerprint theirs;
      const std::byte* slot = fabric.try_recv(peer, &theirs);
      if (slot == nullptr) return false;
      if (!(theirs == fp)) {
        throw Error(ErrorCode::mismatch, ctx.op_label() + ": " + fabric.rank_name(fabric.rank()) +
                                             " called recv(count=" + std::to_string(desc_.count) +
                                             ", dtype=" + dtype_name(desc_.dtype) + ") from " +
                                             fabric.rank_name(peer) + ", which called " +
                                             describe_fingerprint(theirs));
      }
      if (len > 0) {
        std::memcpy(static_cast<std::byte*>(desc_.recv) + base * esize_, slot, len * esize_);
      }
      fabric.release_recv(peer);
    }
    ++next_chunk_;
  }
  return true;
}

}  // namespace tpf::coll
