// Tensor: a dense, row-major, 64-byte-aligned array with a shape and an element type. A value type
// (copies are deep), so a layer's saved activations cannot alias a buffer someone else reuses.
// Kernels are written for f32 today; the dtype travels with the data so that bf16 can follow, and
// every kernel checks it (f32()/f64() throw on the wrong type instead of reinterpreting bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpf/dtype.h"

namespace tpf {

using Shape = std::vector<int64_t>;

// "[2, 3, 4]".
std::string shape_string(const Shape& shape);
// Product of the dimensions; throws tpf::Error(invalid_argument) on a negative dimension.
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled.
  explicit Tensor(Shape shape, DType dtype = DType::f32);
  // Contents undefined: for outputs a kernel overwrites completely (saves a pass over memory).
  static Tensor uninitialized(Shape shape, DType dtype = DType::f32);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  int rank() const noexcept { return static_cast<int>(shape_.size()); }
  // Dimension i; negative i counts from the end (-1 is the last).
  int64_t dim(int i) const;
  int64_t numel() const noexcept { return numel_; }
  size_t bytes() const noexcept { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  bool empty() const noexcept { return numel_ == 0; }

  void* data() noexcept { return storage_.get(); }
  const void* data() const noexcept { return storage_.get(); }
  // Typed views; throw tpf::Error(invalid_argument) if the dtype differs.
  float* f32();
  const float* f32() const;
  double* f64();
  const double* f64() const;

  void zero();
  // Same data, new shape of the same element count.
  void reshape(Shape shape);

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const noexcept;
  };
  void allocate();
  void require_dtype(DType wanted) const;

  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t numel_ = 0;
  std::unique_ptr<std::byte[], FreeDeleter> storage_;
};

// f32 tensors end to end in one flat tensor of `size` elements (at least their total; the rest
// zero), for one collective over many tensors; and the reverse, into tensors of the same sizes.
Tensor pack_flat(const std::vector<Tensor*>& parts, int64_t size);  // reads parts only
void unpack_flat(const Tensor& packed, const std::vector<Tensor*>& parts);

}  // namespace tpf
