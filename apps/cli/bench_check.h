// Deterministic buffer contents for `tpf bench -c 1` and the expected results of each collective,
// computed serially from the same formula. Values are small integers (exactly representable in
// every dtype, including i8/u8/f16/bf16) chosen so that sums and products over any realistic rank
// count neither overflow nor round: a wrong value is then a bug, not noise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cli/bench_spec.h"
#include "tpf/dtype.h"

namespace tpf::cli {

// The element that rank `rank` puts at `index` of its send buffer.
double fill_value(DType dtype, ReduceOp op, int rank, size_t index) noexcept;

// Element access by dtype, through double (all fill values and results fit exactly, except avg).
double load_element(DType dtype, const void* buf, size_t index) noexcept;
void store_element(DType dtype, void* buf, size_t index, double value) noexcept;

// Fills `elems` elements of `buf` with fill_value(dtype, op, rank, first_index + i).
void fill_buffer(DType dtype, ReduceOp op, int rank, void* buf, size_t first_index, size_t elems);

// What the collective leaves in this rank's receive buffer (of shape.recv_elems elements; for
// in-place reduce_scatter the rank's block of the send buffer). Only meaningful where
// result_expected() is true.
struct CheckContext {
  Collective collective;
  DType dtype;
  ReduceOp op;
  int rank;
  int nranks;
  int root;
  size_t count;  // CallShape::count
};
bool result_expected(const CheckContext& ctx) noexcept;  // false on non-root ranks of reduce/gather
double expected_value(const CheckContext& ctx, size_t index) noexcept;
// Number of elements of `result` (recv_elems of them) that differ from expected_value.
uint64_t count_wrong(const CheckContext& ctx, const void* result, size_t recv_elems);

}  // namespace tpf::cli
