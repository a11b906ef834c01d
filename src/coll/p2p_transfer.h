// One point-to-point message in flight: moves through the pair's two-chunk mailbox in chunks,
// without ever waiting, so that one thread can keep many messages in both directions going (a
// rank's large send would otherwise hold up the receive its peer's send needs: a ring deadlocks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "coll/op_desc.h"
#include "transport/shm_fabric.h"

namespace tpf::coll {

class P2pTransfer {
 public:
  // `desc` is a validated send or recv; its buffer stays valid until the transfer is done.
  P2pTransfer(const OpDesc& desc, size_t chunk_bytes);

  // Moves every chunk the mailbox has room for (send) or holds (recv); true once the whole
  // message has moved. Throws Error(mismatch) if the peer's message has another count or dtype.
  bool advance(transport::ShmFabric& fabric, const transport::WaitContext& ctx);
  // Would advance() move a chunk now?
  bool ready(const transport::ShmFabric& fabric) const noexcept;

  const OpDesc& desc() const noexcept { return desc_; }
  size_t chunks_moved() const noexcept { return next_chunk_; }
  size_t chunks() const noexcept { return chunks_; }

 private:
  OpDesc desc_;
  size_t esize_;
  size_t chunk_elems_;
  size_t chunks_;  // at least one, so that an empty message still pairs a send with its recv
  size_t next_chunk_ = 0;
};

}  // namespace tpf::coll
