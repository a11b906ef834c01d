#include "cli/bench_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tpf/half.h"

namespace tpf::cli {
namespace {

bool is_unsigned(DType dtype) noexcept { return dtype == DType::u8; }

bool is_float_type(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

template <typename T>
T read_as(const void* buf, size_t index) noexcept {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(buf) + index * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void write_as(void* buf, size_t index, T v) noexcept {
  std::memcpy(static_cast<unsigned char*>(buf) + index * sizeof(T), &v, sizeof(T));
}

// Reduces fill values of ranks 0..n-1 in rank order, as the library promises to.
double reduce_over_ranks(const CheckContext& ctx, size_t send_index) noexcept {
  double acc = fill_value(ctx.dtype, ctx.op, 0, send_index);
  for (int r = 1; r < ctx.nranks; ++r) {
    const double v = fill_value(ctx.dtype, ctx.op, r, send_index);
    switch (ctx.op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (ctx.op == ReduceOp::avg) {
    if (is_float_type(ctx.dtype)) return acc / ctx.nranks;
    // Integer avg truncates toward zero (dtype.h).
    return static_cast<double>(static_cast<int64_t>(acc) / ctx.nranks);
  }
  return acc;
}

// Relative tolerance for values that are not exact (only a floating avg divides).
double tolerance(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 0x1p-22;
    case DType::f64: return 0x1p-50;
    case DType::f16: return 0x1p-9;
    case DType::bf16: return 0x1p-6;
    default: return 0.0;
  }
}

}  // namespace

double fill_value(DType dtype, ReduceOp op, int rank, size_t index) noexcept {
  const size_t r = static_cast<size_t>(rank);
  if (op == ReduceOp::prod) {
    // Mostly +-1 so that products over many ranks stay tiny; rank 0 adds some 2s.
    if (rank == 0 && index % 5 == 1) return 2.0;
    if ((r + index) % 3 == 0 && !is_unsigned(dtype)) return -1.0;
    return 1.0;
  }
  // Small values in [-2, 2] ([0, 2] for u8): sums over up to 63 ranks fit even i8.
  if (is_unsigned(dtype)) return static_cast<double>((r * 7 + index * 3) % 3);
  return static_cast<double>((r * 7 + index * 3) % 5) - 2.0;
}

double load_element(DType dtype, const void* buf, size_t index) noexcept {
  switch (dtype) {
    case DType::f32: return read_as<float>(buf, index);
    case DType::f64: return read_as<double>(buf, index);
    case DType::f16: return f16_to_f32(read_as<uint16_t>(buf, index));
    case DType::bf16: return bf16_to_f32(read_as<uint16_t>(buf, index));
    case DType::i8: return read_as<int8_t>(buf, index);
    case DType::u8: return read_as<uint8_t>(buf, index);
    case DType::i32: return read_as<int32_t>(buf, index);
    case DType::i64: return static_cast<double>(read_as<int64_t>(buf, index));
  }
  return std::nan("");
}

void store_element(DType dtype, void* buf, size_t index, double value) noexcept {
  switch (dtype) {
    case DType::f32: write_as(buf, index, static_cast<float>(value)); break;
    case DType::f64: write_as(buf, index, value); break;
    case DType::f16: write_as(buf, index, f32_to_f16(static_cast<float>(value))); break;
    case DType::bf16: write_as(buf, index, f32_to_bf16(static_cast<float>(value))); break;
    case DType::i8: write_as(buf, index, static_cast<int8_t>(value)); break;
    case DType::u8: write_as(buf, index, static_cast<uint8_t>(value)); break;
    case DType::i32: write_as(buf, index, static_cast<int32_t>(value)); break;
    case DType::i64: write_as(buf, index, static_cast<int64_t>(value)); break;
  }
}

void fill_buffer(DType dtype, ReduceOp op, int rank, void* buf, size_t first_index, size_t elems) {
  for (size_t i = 0; i < elems; ++i) {
    store_element(dtype, buf, i, fill_value(dtype, op, rank, first_index + i));
  }
}

bool result_expected(const CheckContext& ctx) noexcept {
  switch (ctx.collective) {
    case Collective::reduce:
    case Collective::gather: return ctx.rank == ctx.root;
    case Collective::barrier: return false;
    default: return true;
  }
}

double expected_value(const CheckContext& ctx, size_t index) noexcept {
  const size_t rank = static_cast<size_t>(ctx.rank);
  const size_t count = std::max<size_t>(ctx.count, 1);
  switch (ctx.collective) {
    case Collective::all_reduce:
    case Collective::reduce: return reduce_over_ranks(ctx, index);
    case Collective::reduce_scatter: return reduce_over_ranks(ctx, rank * count + index);
    case Collective::broadcast: return fill_value(ctx.dtype, ctx.op, ctx.root, index);
    case Collective::all_gather:
    case Collective::gather:
      return fill_value(ctx.dtype, ctx.op, static_cast<int>(index / count), index % count);
    case Collective::scatter: return fill_value(ctx.dtype, ctx.op, ctx.root, rank * count + index);
    case Collective::all_to_all:
      return fill_value(ctx.dtype, ctx.op, static_cast<int>(index / count),
                        rank * count + index % count);
    case Collective::send_recv:
      return fill_value(ctx.dtype, ctx.op, (ctx.rank + ctx.nranks - 1) % ctx.nranks, index);
    case Collective::barrier: return 0.0;
  }
  return 0.0;
}

uint64_t count_wrong(const CheckContext& ctx, const void* result, size_t recv_elems) {
  if (!result_expected(ctx)) return 0;
  const double tol = ctx.op == ReduceOp::avg ? tolerance(ctx.dtype) : 0.0;
  uint64_t wrong = 0;
  for (size_t i = 0; i < recv_elems; ++i) {
    const double got = load_element(ctx.dtype, result, i);
    const double want = expected_value(ctx, i);
    if (got == want) continue;
    if (tol > 0.0 && std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want))) continue;
    ++wrong;
  }
  return wrong;
}

}  // namespace tpf::cli
