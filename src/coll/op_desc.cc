#include "coll/op_desc.h"

namespace tpf::coll {

Collective collective_of(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::all_reduce: return Collective::all_reduce;
    case OpKind::reduce: return Collective::reduce;
    case OpKind::broadcast: return Collective::broadcast;
    case OpKind::all_gather: return Collective::all_gather;
    case OpKind::reduce_scatter: return Collective::reduce_scatter;
    case OpKind::all_to_all: return Collective::all_to_all;
    case OpKind::gather: return Collective::gather;
    case OpKind::scatter: return Collective::scatter;
    case OpKind::send:
    case OpKind::recv: return Collective::send_recv;
    case OpKind::barrier: break;
  }
  return Collective::barrier;
}

const char* op_kind_name(OpKind kind) noexcept {
  if (kind == OpKind::send) return "send";
  if (kind == OpKind::recv) return "recv";
  return collective_name(collective_of(kind));
}

bool is_reducing(OpKind kind) noexcept { return collective_reduces(collective_of(kind)); }

bool is_point_to_point(OpKind kind) noexcept {
  return kind == OpKind::send || kind == OpKind::recv;
}

bool is_rooted(OpKind kind) noexcept { return collective_has_root(collective_of(kind)); }

transport::Fingerprint collective_fingerprint(const OpDesc& desc, uint64_t sequence) {
  // Fields that do not apply to a call are left zero, so they cannot cause false mismatches.
  uint64_t op = is_reducing(desc.kind) ? static_cast<uint64_t>(desc.op) + 1 : 0;
  uint64_t root = is_rooted(desc.kind) ? static_cast<uint64_t>(desc.root) + 1 : 0;
  uint64_t dtype = desc.kind == OpKind::barrier ? 0 : static_cast<uint64_t>(desc.dtype) + 1;
  transport::Fingerprint fp;
  fp.words[0] = sequence;
  fp.words[1] = desc.kind == OpKind::barrier ? 0 : desc.count;
  fp.words[2] = static_cast<uint64_t>(desc.kind) | (dtype << 8) | (op << 16) | (root << 32);
  return fp;
}

// Bits 24..27 of words[2]: 0 where no network algorithm applies, else the algorithm + 1. Bits
// 28..31: 0 where no all_gather exchange applies, 1 direct, 2 round a ring.
transport::Fingerprint with_network_algorithm(transport::Fingerprint fp,
                                              NetworkAlgorithm algorithm) {
  fp.words[2] |= (static_cast<uint64_t>(algorithm) + 1) << 24;
  return fp;
}

transport::Fingerprint with_gather_exchange(transport::Fingerprint fp, bool ring) {
  fp.words[2] |= uint64_t{ring ? 2u : 1u} << 28;
  return fp;
}

transport::Fingerprint message_fingerprint(DType dtype, size_t count, uint64_t chunk) {
  transport::Fingerprint fp;
  fp.words[0] = chunk;
  fp.words[1] = count;
  fp.words[2] = static_cast<uint64_t>(OpKind::send) | ((static_cast<uint64_t>(dtype) + 1) << 8);
  return fp;
}

std::string describe_fingerprint(const transport::Fingerprint& fp) {
  auto kind = static_cast<OpKind>(fp.words[2] & 0xff);
  uint64_t dtype = (fp.words[2] >> 8) & 0xff;
  uint64_t op = (fp.words[2] >> 16) & 0xff;
  uint64_t network = (fp.words[2] >> 24) & 0xf;
  uint64_t exchange = (fp.words[2] >> 28) & 0xf;
  uint64_t root = fp.words[2] >> 32;
  if (kind == OpKind::send) {  // only point-to-point messages carry the send kind
    return "send(count=" + std::to_string(fp.words[1]) +
           ", dtype=" + dtype_name(static_cast<DType>(dtype - 1)) + ")";
  }
  std::string text = std::string(op_kind_name(kind)) + "(";
  if (kind != OpKind::barrier) {
    text += "count=" + std::to_string(fp.words[1]);
    if (dtype != 0) text += std::string(", dtype=") + dtype_name(static_cast<DType>(dtype - 1));
    if (op != 0) text += std::string(", op=") + reduce_op_name(static_cast<ReduceOp>(op - 1));
    if (root != 0) text += ", root=" + std::to_string(root - 1);
    if (network != 0) {
      text += std::string(", network algorithm ") +
              network_algorithm_name(static_cast<NetworkAlgorithm>(network - 1));
    }
    if (exchange != 0) text += exchange == 2 ? ", exchange round a ring" : ", exchange direct";
  }
  return text + ") at sequence " + std::to_string(fp.words[0]);
}

}  // namespace tpf::coll
