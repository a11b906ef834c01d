// One collective or point-to-point call, as the algorithms see it, and its fingerprint (what peers
// compare before touching data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "coll/collective_kinds.h"
#include "coll/network_cost.h"
#include "tpf/dtype.h"
#include "transport/shm_fabric.h"

namespace tpf::coll {

enum class OpKind : uint8_t {
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  all_to_all,
  gather,
  scatter,
  send,
  recv,
  barrier
};

// The collective a call belongs to (a send and a recv are the two halves of send_recv); names,
// roots and reductions come from its row of the vocabulary (collective_kinds.h).
Collective collective_of(OpKind kind) noexcept;
const char* op_kind_name(OpKind kind) noexcept;  // "send" and "recv" for the two halves
bool is_reducing(OpKind kind) noexcept;
bool is_rooted(OpKind kind) noexcept;
bool is_point_to_point(OpKind kind) noexcept;  // send or recv

struct OpDesc {
  OpKind kind = OpKind::barrier;
  DType dtype = DType::u8;
  ReduceOp op = ReduceOp::sum;
  size_t count = 0;  // elements, as passed by the caller (per rank for gather-like calls)
  int root = 0;      // rooted collectives
  int peer = 0;      // send / recv
  const void* send = nullptr;
  void* recv = nullptr;
};

// The fingerprint of a collective: sequence, kind, dtype, count, and the op/root where they matter.
transport::Fingerprint collective_fingerprint(const OpDesc& desc, uint64_t sequence);
// The fingerprint of chunk `chunk` of a point-to-point message (as the sender describes it).
transport::Fingerprint message_fingerprint(DType dtype, size_t count, uint64_t chunk);
// "all_reduce(count=10, dtype=f32, op=sum) at sequence 3"
std::string describe_fingerprint(const transport::Fingerprint& fp);

// The fingerprint of a collective across hosts that chose `algorithm` for its network part: the
// leaders compare it, so leaders whose settings (TPF_NET_*) made them choose differently fail with
// a mismatch naming both choices instead of exchanging messages that do not fit each other.
transport::Fingerprint with_network_algorithm(transport::Fingerprint fp,
                                              NetworkAlgorithm algorithm);
// The same for all_gather's exchange between hosts: round a ring, or from every host to every
// other (network_cost.h: all_gather_in_ring).
transport::Fingerprint with_gather_exchange(transport::Fingerprint fp, bool ring);

}  // namespace tpf::coll
