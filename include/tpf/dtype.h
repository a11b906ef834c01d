// Element types and reduction operators understood by the collectives.
#pragma once

#include "tpf/export.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace TPF_API tpf {

enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };
inline constexpr int kNumDTypes = 8;

// avg divides the sum by the number of ranks; for integer types the division truncates toward zero.
enum class ReduceOp : uint8_t { sum, prod, min, max, avg };
inline constexpr int kNumReduceOps = 5;

// False for values outside the enumeration (e.g. an integer cast from a C caller).
bool is_valid(DType dtype) noexcept;
bool is_valid(ReduceOp op) noexcept;

// Throws tpf::Error(invalid_argument) for an invalid dtype.
size_t dtype_size(DType dtype);
bool is_floating(DType dtype) noexcept;

const char* dtype_name(DType dtype) noexcept;      // "f32", "bf16", ... ("invalid" otherwise)
const char* reduce_op_name(ReduceOp op) noexcept;  // "sum", "avg", ...
// Accepts the names above and common aliases ("float", "float32", "half", "int32", ...).
std::optional<DType> parse_dtype(std::string_view name) noexcept;
std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept;

}  // namespace tpf
