// Test data and a plain serial reference for the collectives: deterministic per-rank inputs and a
// reduction written here, independently of the library's kernels, that the collectives' results are
// compared to bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpf/dtype.h"

namespace tpf::testing {

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i8,  DType::u8,  DType::i32, DType::i64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                       ReduceOp::avg};
// Empty, one element, odd, and a prime (never divisible by the rank counts under test).
inline constexpr size_t kSmallCounts[] = {0, 1, 7, 4099};
// Bytes of the "large" size class: well over one chunk of any staging buffer.
inline constexpr size_t kLargeBytes = size_t{5} << 20;

// Inputs longer than this repeat with this (prime) period.
inline constexpr size_t kInputPeriod = 65537;
// The large size is tried only for these (bounds the suite's run time).
bool is_large_dtype(DType dtype);

size_t element_size(DType dtype);  // written here, not dtype_size(): the test's own view

// splitmix64's finalizer: a cheap, well-spread hash, for deterministic test data.
uint64_t mix64(uint64_t x);

// Elements of `rank`'s input (count elements), deterministic in (dtype, op, count, rank, salt);
// periodic with period kInputPeriod beyond that many elements.
// The value range suits op: prod gets values near 1 (floats) so that products stay finite; avg gets
// integers small enough that the sum of 8 ranks does not overflow; min/max floats contain quiet
// NaNs.
std::vector<uint8_t> make_input(DType dtype, ReduceOp op, size_t count, int rank, uint64_t salt);

// out[i] = inputs[0][i] op inputs[1][i] op ... in rank order, with the semantics of comm.h:
// f16/bf16 accumulate in f32 and round once (nearest even), integer sum/prod wrap, avg = sum / n
// (integers truncate toward zero), min/max propagate NaN. Reads count elements from each input
// starting at element `offset`.
std::vector<uint8_t> reference_reduce(DType dtype, ReduceOp op,
                                      const std::vector<std::vector<uint8_t>>& inputs,
                                      size_t offset, size_t count);

// "" if the count elements are bitwise equal; otherwise names the first differing elements with
// their bits and values.
std::string compare_elements(DType dtype, const void* got, const void* want, size_t count);

// An output buffer with guard bytes on both sides and a fill pattern inside, so that writes out of
// bounds and elements never written are both caught.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, uint8_t fill = 0xCD);
  uint8_t* data() noexcept { return storage_.data() + kGuard; }
  const uint8_t* data() const noexcept { return storage_.data() + kGuard; }
  size_t size() const noexcept { return bytes_; }
  bool guards_intact() const;

 private:
  static constexpr size_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA5;
  size_t bytes_;
  std::vector<uint8_t> storage_;
};

}  // namespace tpf::testing

namespace tpf::testing {

// Collects a child's verification failures so that one run reports several, not only the first.
class FailureLog {
 public:
  void add(const std::string& what) {
    if (entries_.size() < 12) entries_.push_back(what);
    ++total_;
  }
  // Throws ChildCheckFailure listing the failures, if any.
  void throw_if_any(const std::string& where) const;

 private:
  std::vector<std::string> entries_;
  size_t total_ = 0;
};

// "all_reduce f16 prod count=7 in-place root=1 (rank 1 of 3)"; op/root omitted when negative.
std::string case_name(const char* collective, DType dtype, int op, size_t count, bool in_place,
                      int root, int rank, int size);

}  // namespace tpf::testing
