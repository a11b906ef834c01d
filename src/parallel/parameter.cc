#include "parallel/parameter.h"

#include <cstring>

#include "tpf/error.h"

namespace tpf {

namespace {

// The global tensor seen as [outer, extent, inner] around the sharded dimension.
struct Cut {
  int64_t outer = 1, extent = 0, inner = 1;
  int64_t block = 0;  // extent / blocks
  int64_t shard = 0;  // block / parts
};

Cut cut_of(const Shape& global, const ShardSpec& spec, int parts, const std::string& name) {
  if (spec.dim >= static_cast<int>(global.size())) {
    throw Error(ErrorCode::invalid_argument, name + ": shard dimension " +
                                                 std::to_string(spec.dim) + " out of range for " +
                                                 shape_string(global));
  }
  Cut c;
  for (int i = 0; i < spec.dim; ++i) c.outer *= global[static_cast<size_t>(i)];
  c.extent = global[static_cast<size_t>(spec.dim)];
  for (size_t i = static_cast<size_t>(spec.dim) + 1; i < global.size(); ++i) c.inner *= global[i];
  if (spec.blocks < 1 || c.extent % spec.blocks != 0 || (c.extent / spec.blocks) % parts != 0) {
    throw Error(ErrorCode::invalid_argument,
                name + ": dimension " + std::to_string(spec.dim) + " of " + shape_string(global) +
                    " (" + std::to_string(c.extent) + " = " + std::to_string(spec.blocks) +
                    " block(s)) does not split over " + std::to_string(parts) +
                    " tensor-parallel ranks; choose widths/heads divisible by the TP size");
  }
  c.block = c.extent / spec.blocks;
  c.shard = c.block / parts;
  return c;
}

// Calls f(local_offset, global_offset, run_length) for every contiguous run of the slice.
template <class F>
void for_each_run(const Shape& global, const ShardSpec& spec, int rank, int parts,
                  const std::string& name, F&& f) {
  if (spec.replicated()) {
    f(int64_t{0}, int64_t{0}, shape_numel(global));
    return;
  }
  const Cut c = cut_of(global, spec, parts, name);
  const int64_t run = c.shard * c.inner;
  int64_t local = 0;
  for (int64_t o = 0; o < c.outer; ++o) {
    for (int b = 0; b < spec.blocks; ++b) {
      const int64_t g = (o * c.extent + b * c.block + rank * c.shard) * c.inner;
      f(local, g, run);
      local += run;
    }
  }
}

}  // namespace

Shape local_shape(const Parameter& p, int parts) {
  Shape s = p.global_shape;
  if (!p.shard.replicated()) {
    const Cut c = cut_of(p.global_shape, p.shard, parts, p.name);
    s[static_cast<size_t>(p.shard.dim)] = c.shard * p.shard.blocks;
  }
  return s;
}

std::vector<int64_t> global_indices(const Parameter& p, int rank, int parts) {
  std::vector<int64_t> out;
  for_each_run(p.global_shape, p.shard, rank, parts, p.name, [&](int64_t, int64_t g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out.push_back(g + i);
  });
  return out;
}

void initialize(Parameter& p, uint64_t seed, int rank, int parts) {
  p.value = Tensor(local_shape(p, parts));
  p.grad = Tensor(p.value.shape());
  float* v = p.value.f32();
  switch (p.init) {
    case Init::zeros: return;
    case Init::ones:
      for (int64_t i = 0; i < p.value.numel(); ++i) v[i] = 1.0f;
      return;
    case Init::normal: {
      const RngKey key{seed, stream_of(p.name)};
      for_each_run(p.global_shape, p.shard, rank, parts, p.name,
                   [&](int64_t l, int64_t g, int64_t n) {
                     for (int64_t i = 0; i < n; ++i) {
                       v[l + i] = counter_normal(key, static_cast<uint64_t>(g + i)) * p.init_std;
                     }
                   });
      return;
    }
  }
}

Tensor slice_of_global(const Tensor& global, const ShardSpec& spec, int rank, int parts) {
  if (spec.replicated()) return global;
  Parameter shape_only;
  shape_only.name = "tensor " + shape_string(global.shape());
  shape_only.global_shape = global.shape();
  shape_only.shard = spec;
  Tensor local(local_shape(shape_only, parts), global.dtype());
  const size_t es = dtype_size(global.dtype());
  for_each_run(
      global.shape(), spec, rank, parts, shape_only.name, [&](int64_t l, int64_t g, int64_t n) {
        std::memcpy(static_cast<std::byte*>(local.data()) + static_cast<size_t>(l) * es,
                    static_cast<const std::byte*>(global.data()) + static_cast<size_t>(g) * es,
                    static_cast<size_t>(n) * es);
      });
  return local;
}

Tensor global_from_slices(const std::vector<Tensor>& slices, const ShardSpec& spec) {
  if (slices.empty()) throw Error(ErrorCode::invalid_argument, "global_from_slices: no slices");
  if (spec.replicated()) return slices.front();
  const int parts = static_cast<int>(slices.size());
  Shape global = slices.front().shape();
  if (spec.dim >= static_cast<int>(global.size())) {
    throw Error(ErrorCode::invalid_argument, "global_from_slices: shard dimension out of range");
  }
  global[static_cast<size_t>(spec.dim)] *= parts;
  Tensor whole(global, slices.front().dtype());
  const size_t es = dtype_size(whole.dtype());
  for (int r = 0; r < parts; ++r) {
    if (slices[static_cast<size_t>(r)].shape() != slices.front().shape() ||
        slices[static_cast<size_t>(r)].dtype() != whole.dtype()) {
      throw Error(ErrorCode::invalid_argument,
                  "global_from_slices: slice " + std::to_string(r) + " has shape " +
                      shape_string(slices[static_cast<size_t>(r)].shape()) + ", slice 0 has " +
                      shape_string(slices.front().shape()));
    }
    for_each_run(
        global, spec, r, parts, "global_from_slices", [&](int64_t l, int64_t g, int64_t n) {
          std::memcpy(static_cast<std::byte*>(whole.data()) + static_cast<size_t>(g) * es,
                      static_cast<const std::byte*>(slices[static_cast<size_t>(r)].data()) +
                          static_cast<size_t>(l) * es,
                      static_cast<size_t>(n) * es);
        });
  }
  return whole;
}

std::vector<Tensor*> gradients_of(const std::vector<Parameter*>& params) {
  std::vector<Tensor*> out;
  for (Parameter* p : params) out.push_back(&p->grad);
  return out;
}

std::vector<Tensor*> values_of(const std::vector<Parameter*>& params) {
  std::vector<Tensor*> out;
  for (Parameter* p : params) out.push_back(&p->value);
  return out;
}

int64_t total_numel(const std::vector<Tensor*>& tensors) {
  int64_t total = 0;
  for (const Tensor* t : tensors) total += t->numel();
  return total;
}

}  // namespace tpf
