#include "coll/op_desc.h"

namespace tpf::coll {
const char* op_kind_name(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::reduce: return "reduce";
    case OpKind::broadcast: return "broadcast";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::gather: return "gather";
    case OpKind::scatter: return "scatter";
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::barrier: return "barrier";
  }
  return "unknown";
}

bool is_reducing(OpKind kind) noexcept {
  return kind == OpKind::all_reduce || kind == OpKind::reduce || kind == OpKind::reduce_scatter;
}

bool is_point_to_point(OpKind kind) noexcept {
  return kind == OpKind::send || kind == OpKind::recv;
}

bool is_rooted(OpKind kind) noexcept {
  return kind == OpKind::reduce || kind == OpKind::broadcast || kind == OpKind::gather ||
         kind == OpKind::scatter;
}

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
  }
  return text + ") at sequence " + std::to_string(fp.words[0]);
}

}  // namespace tpf::coll
