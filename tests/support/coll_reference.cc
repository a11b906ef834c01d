#include "support/coll_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "support/multiproc.h"
#include "tpf/half.h"

namespace tpf::testing {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

template <class T>
T load(const uint8_t* base, size_t i) {
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
void store(uint8_t* base, size_t i, T v) {
  std::memcpy(base + i * sizeof(T), &v, sizeof(T));
}

bool is_float(DType d) { return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16; }

// Floats: combine two values the way comm.h specifies (NaN-propagating min/max).
template <class F>
F combine_float(ReduceOp op, F acc, F x) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return acc + x;
    case ReduceOp::prod: return acc * x;
    case ReduceOp::min:
      if (std::isnan(acc)) return acc;
      if (std::isnan(x)) return x;
      return x < acc ? x : acc;
    case ReduceOp::max:
      if (std::isnan(acc)) return acc;
      if (std::isnan(x)) return x;
      return x > acc ? x : acc;
  }
  return acc;
}

// Floats stored as F, accumulated as A (f16/bf16: float), converted by to_acc/from_acc.
template <class Stored, class Acc, class ToAcc, class FromAcc>
void reduce_float(ReduceOp op, const std::vector<std::vector<uint8_t>>& in, size_t offset,
                  size_t count, uint8_t* out, ToAcc to_acc, FromAcc from_acc) {
  const int n = static_cast<int>(in.size());
  for (size_t i = 0; i < count; ++i) {
    Acc acc = to_acc(load<Stored>(in[0].data(), offset + i));
    for (int r = 1; r < n; ++r) acc = combine_float(op, acc, to_acc(load<Stored>(in[static_cast<size_t>(r)].data(), offset + i)));
    if (op == ReduceOp::avg) acc = acc / static_cast<Acc>(n);
    store<Stored>(out, i, from_acc(acc));
  }
}

template <class T>
void reduce_int(ReduceOp op, const std::vector<std::vector<uint8_t>>& in, size_t offset,
                size_t count, uint8_t* out) {
  using U = std::make_unsigned_t<T>;
  const int n = static_cast<int>(in.size());
  for (size_t i = 0; i < count; ++i) {
    T acc = load<T>(in[0].data(), offset + i);
    int64_t wide = acc;  // avg inputs are bounded so that this sum cannot overflow
    for (int r = 1; r < n; ++r) {
      T x = load<T>(in[static_cast<size_t>(r)].data(), offset + i);
      switch (op) {
        // Unsigned arithmetic wraps modulo 2^bits; C++20 defines the conversion back to T.
        case ReduceOp::sum: acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(x))); break;
        case ReduceOp::prod: acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(x))); break;
        case ReduceOp::min: acc = x < acc ? x : acc; break;
        case ReduceOp::max: acc = x > acc ? x : acc; break;
        case ReduceOp::avg: wide += x; break;
      }
    }
    if (op == ReduceOp::avg) acc = static_cast<T>(wide / n);  // C++ division truncates toward zero
    store<T>(out, i, acc);
  }
}

template <class T>
T int_value(uint64_t bits, ReduceOp op) {
  if (op != ReduceOp::avg) return static_cast<T>(bits);  // full range: sums and products wrap
  // avg: |value| <= max/8, so that a sum over up to 8 ranks fits in T.
  const int64_t limit = static_cast<int64_t>(std::numeric_limits<T>::max() / 8);
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>(static_cast<int64_t>(bits % static_cast<uint64_t>(2 * limit + 1)) - limit);
  } else {
    return static_cast<T>(bits % static_cast<uint64_t>(limit + 1));
  }
}

double decode(DType d, const uint8_t* p, size_t i) {
  switch (d) {
    case DType::f32: return load<float>(p, i);
    case DType::f64: return load<double>(p, i);
    case DType::f16: return f16_to_f32(load<uint16_t>(p, i));
    case DType::bf16: return bf16_to_f32(load<uint16_t>(p, i));
    case DType::i8: return load<int8_t>(p, i);
    case DType::u8: return load<uint8_t>(p, i);
    case DType::i32: return load<int32_t>(p, i);
    case DType::i64: return static_cast<double>(load<int64_t>(p, i));
  }
  return 0;
}

}  // namespace

bool is_large_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i32;
}

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  throw std::invalid_argument("element_size: invalid dtype");
}

std::vector<uint8_t> make_input(DType dtype, ReduceOp op, size_t count, int rank, uint64_t salt) {
  std::vector<uint8_t> out(count * element_size(dtype));
  const uint64_t seed = mix64(mix64(salt) ^ (static_cast<uint64_t>(rank) + 1) * 0xD1B54A32D192ED03ull ^
                              static_cast<uint64_t>(dtype) << 8 ^ static_cast<uint64_t>(op) << 16 ^ count);
  const bool with_nans = op == ReduceOp::min || op == ReduceOp::max;
  // Large inputs repeat with a prime period: generating 5 MiB per rank in every rank would
  // dominate the suite's run time, and a prime period still exposes any block landing at a
  // power-of-two offset other than its own.
  const size_t fresh = std::min(count, kInputPeriod);
  for (size_t i = 0; i < fresh; ++i) {
    const uint64_t bits = mix64(seed + i * 0x9E3779B97F4A7C15ull);
    if (is_float(dtype)) {
      const bool nan = with_nans && (bits >> 40) % 61 == 0;
      const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
      double v = op == ReduceOp::prod ? 0.5 + 1.5 * u : 8.0 * u - 4.0;
      if (v == 0.0) v = 0.25;  // keep signed zeros out of min/max (their order is unspecified)
      switch (dtype) {
        case DType::f32: store<float>(out.data(), i, nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(v)); break;
        case DType::f64: store<double>(out.data(), i, nan ? std::numeric_limits<double>::quiet_NaN() : v); break;
        case DType::f16: store<uint16_t>(out.data(), i, nan ? uint16_t{0x7E00} : f32_to_f16(static_cast<float>(v))); break;
        case DType::bf16: store<uint16_t>(out.data(), i, nan ? uint16_t{0x7FC0} : f32_to_bf16(static_cast<float>(v))); break;
        default: break;
      }
      continue;
    }
    switch (dtype) {
      case DType::i8: store(out.data(), i, int_value<int8_t>(bits, op)); break;
      case DType::u8: store(out.data(), i, int_value<uint8_t>(bits, op)); break;
      case DType::i32: store(out.data(), i, int_value<int32_t>(bits, op)); break;
      case DType::i64: store(out.data(), i, int_value<int64_t>(bits, op)); break;
      default: break;
    }
  }
  const size_t es = element_size(dtype);
  for (size_t done = fresh; done < count;) {
    const size_t n = std::min(fresh, count - done);
    std::memcpy(out.data() + done * es, out.data(), n * es);
    done += n;
  }
  return out;
}

std::vector<uint8_t> reference_reduce(DType dtype, ReduceOp op,
                                      const std::vector<std::vector<uint8_t>>& inputs,
                                      size_t offset, size_t count) {
  if (inputs.empty()) throw std::invalid_argument("reference_reduce: no inputs");
  std::vector<uint8_t> out(count * element_size(dtype));
  auto same_f = [](float x) { return x; };
  auto same_d = [](double x) { return x; };
  auto f16_in = [](uint16_t b) { return f16_to_f32(b); };
  auto f16_out = [](float x) { return f32_to_f16(x); };
  auto bf16_in = [](uint16_t b) { return bf16_to_f32(b); };
  auto bf16_out = [](float x) { return f32_to_bf16(x); };
  switch (dtype) {
    case DType::f32: reduce_float<float, float>(op, inputs, offset, count, out.data(), same_f, same_f); break;
    case DType::f64: reduce_float<double, double>(op, inputs, offset, count, out.data(), same_d, same_d); break;
    case DType::f16: reduce_float<uint16_t, float>(op, inputs, offset, count, out.data(), f16_in, f16_out); break;
    case DType::bf16: reduce_float<uint16_t, float>(op, inputs, offset, count, out.data(), bf16_in, bf16_out); break;
    case DType::i8: reduce_int<int8_t>(op, inputs, offset, count, out.data()); break;
    case DType::u8: reduce_int<uint8_t>(op, inputs, offset, count, out.data()); break;
    case DType::i32: reduce_int<int32_t>(op, inputs, offset, count, out.data()); break;
    case DType::i64: reduce_int<int64_t>(op, inputs, offset, count, out.data()); break;
  }
  return out;
}

std::string compare_elements(DType dtype, const void* got, const void* want, size_t count) {
  const size_t es = element_size(dtype);
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  if (count == 0 || std::memcmp(g, w, count * es) == 0) return "";
  std::ostringstream os;
  size_t shown = 0, differing = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) == 0) continue;
    ++differing;
    if (shown++ >= 4) continue;
    uint64_t gb = 0, wb = 0;
    std::memcpy(&gb, g + i * es, es);
    std::memcpy(&wb, w + i * es, es);
    os << (shown > 1 ? "; " : "") << "element " << i << ": got 0x" << std::hex << gb << std::dec
       << " (" << decode(dtype, g, i) << ") want 0x" << std::hex << wb << std::dec << " ("
       << decode(dtype, w, i) << ")";
  }
  os << " [" << differing << " of " << count << " elements differ]";
  return os.str();
}

GuardedBuffer::GuardedBuffer(size_t bytes, uint8_t fill)
    : bytes_(bytes), storage_(bytes + 2 * kGuard, kGuardByte) {
  std::memset(storage_.data() + kGuard, fill, bytes);
}

bool GuardedBuffer::guards_intact() const {
  for (size_t i = 0; i < kGuard; ++i) {
    if (storage_[i] != kGuardByte || storage_[kGuard + bytes_ + i] != kGuardByte) return false;
  }
  return true;
}

}  // namespace tpf::testing

namespace tpf::testing {

void FailureLog::throw_if_any(const std::string& where) const {
  if (total_ == 0) return;
  std::string text = where + ": " + std::to_string(total_) + " failed case(s):";
  for (const auto& e : entries_) text += "\n  " + e;
  if (total_ > entries_.size()) text += "\n  ...";
  throw ChildCheckFailure(text);
}

std::string case_name(const char* collective, DType dtype, int op, size_t count, bool in_place,
                      int root, int rank, int size) {
  std::string s = std::string(collective) + " " + dtype_name(dtype);
  if (op >= 0) s += std::string(" ") + reduce_op_name(static_cast<ReduceOp>(op));
  s += " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place");
  if (root >= 0) s += " root=" + std::to_string(root);
  s += " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  return s;
}

}  // namespace tpf::testing
