#include "tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tpf/error.h"

namespace tpf {

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw Error(ErrorCode::invalid_argument,
                  "negative dimension in shape " + shape_string(shape));
    n *= d;
  }
  return n;
}

void Tensor::FreeDeleter::operator()(std::byte* p) const noexcept { std::free(p); }

Tensor::Tensor(Shape shape, DType dtype) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = shape_numel(shape_);
  allocate();
  zero();
}

Tensor Tensor::uninitialized(Shape shape, DType dtype) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.allocate();
  return t;
}

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_), shape_(other.shape_), numel_(other.numel_) {
  allocate();
  if (bytes() > 0) std::memcpy(data(), other.data(), bytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::allocate() {
  // Rounded up to whole cache lines: aligned_alloc wants a multiple of the alignment, and GEMM
  // kernels read aligned vectors.
  const size_t size = (bytes() + 63) / 64 * 64;
  if (size == 0) {
    storage_.reset();
    return;
  }
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, size));
  if (p == nullptr) {
    throw Error(ErrorCode::resource, "out of memory allocating a tensor of shape " +
                                         shape_string(shape_) + " (" + std::to_string(size) +
                                         " bytes)");
  }
  storage_.reset(p);
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r) {
    throw Error(ErrorCode::invalid_argument, "dimension " + std::to_string(i) +
                                                 " out of range for a tensor of shape " +
                                                 shape_string(shape_));
  }
  return shape_[static_cast<size_t>(j)];
}

void Tensor::require_dtype(DType wanted) const {
  if (dtype_ != wanted) {
    throw Error(ErrorCode::invalid_argument,
                std::string("tensor of shape ") + shape_string(shape_) + " holds " +
                    dtype_name(dtype_) + ", not " + dtype_name(wanted));
  }
}

float* Tensor::f32() {
  require_dtype(DType::f32);
  return reinterpret_cast<float*>(storage_.get());
}
const float* Tensor::f32() const {
  require_dtype(DType::f32);
  return reinterpret_cast<const float*>(storage_.get());
}
double* Tensor::f64() {
  require_dtype(DType::f64);
  return reinterpret_cast<double*>(storage_.get());
}
const double* Tensor::f64() const {
  require_dtype(DType::f64);
  return reinterpret_cast<const double*>(storage_.get());
}

void Tensor::zero() {
  if (bytes() > 0) std::memset(data(), 0, bytes());
}

void Tensor::reshape(Shape shape) {
  if (shape_numel(shape) != numel_) {
    throw Error(ErrorCode::invalid_argument, "cannot reshape " + shape_string(shape_) + " to " +
                                                 shape_string(shape) + ": element counts differ");
  }
  shape_ = std::move(shape);
}

Tensor pack_flat(const std::vector<Tensor*>& parts, int64_t size) {
  Tensor packed({size});
  int64_t at = 0;
  for (const Tensor* t : parts) {
    std::copy_n(t->f32(), t->numel(), packed.f32() + at);
    at += t->numel();
  }
  return packed;
}

void unpack_flat(const Tensor& packed, const std::vector<Tensor*>& parts) {
  int64_t at = 0;
  for (Tensor* t : parts) {
    std::copy_n(packed.f32() + at, t->numel(), t->f32());
    at += t->numel();
  }
}

}  // namespace tpf
