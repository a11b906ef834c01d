#include "parallel/gather_parameter.h"

#include <cstring>

namespace tpf {

Tensor gather_global(TpGroup& tp, const Parameter& p, const Tensor& local) {
  if (p.shard.replicated() || tp.size() == 1) return local;
  Tensor all(Shape{tp.size(), local.numel()}, local.dtype());
  tp.comm->all_gather(local.data(), all.data(), static_cast<size_t>(local.numel()), local.dtype());
  std::vector<Tensor> slices;
  for (int r = 0; r < tp.size(); ++r) {
    Tensor s(local.shape(), local.dtype());
    std::memcpy(s.data(),
                static_cast<const std::byte*>(all.data()) + static_cast<size_t>(r) * local.bytes(),
                local.bytes());
    slices.push_back(std::move(s));
  }
  return global_from_slices(slices, p.shard);
}

}  // namespace tpf
