#include "tpf/dtype.h"

#include <cctype>
#include <string>

#include "tpf/error.h"

namespace tpf {

namespace {

// Case-insensitive equality: users type "BF16" as often as "bf16".
bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

struct DTypeAlias {
  std::string_view name;
  DType dtype;
};

// The canonical names come first; the rest are the spellings of NumPy, PyTorch and C.
constexpr DTypeAlias kDTypeAliases[] = {
    {"f32", DType::f32},     {"f64", DType::f64},   {"f16", DType::f16},
    {"bf16", DType::bf16},   {"i8", DType::i8},     {"u8", DType::u8},
    {"i32", DType::i32},     {"i64", DType::i64},   {"float", DType::f32},
    {"float32", DType::f32}, {"fp32", DType::f32},  {"double", DType::f64},
    {"float64", DType::f64}, {"fp64", DType::f64},  {"half", DType::f16},
    {"float16", DType::f16}, {"fp16", DType::f16},  {"bfloat16", DType::bf16},
    {"int8", DType::i8},     {"char", DType::i8},   {"uint8", DType::u8},
    {"byte", DType::u8},     {"int32", DType::i32}, {"int", DType::i32},
    {"int64", DType::i64},   {"long", DType::i64},
};

}  // namespace

bool is_valid(DType dtype) noexcept { return static_cast<unsigned>(dtype) < kNumDTypes; }

bool is_valid(ReduceOp op) noexcept { return static_cast<unsigned>(op) < kNumReduceOps; }

size_t dtype_size(DType dtype) {
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
  throw Error(ErrorCode::invalid_argument,
              "dtype_size: invalid dtype value " + std::to_string(static_cast<unsigned>(dtype)) +
                  " (valid values are 0.." + std::to_string(kNumDTypes - 1) +
                  "; pass a tpf::DType enumerator)");
}

bool is_floating(DType dtype) noexcept {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "invalid";
}

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
  }
  return "invalid";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const DTypeAlias& alias : kDTypeAliases) {
    if (iequals(name, alias.name)) return alias.dtype;
  }
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) noexcept {
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    if (iequals(name, reduce_op_name(op))) return op;
  }
  // Common synonyms (MPI/NCCL spellings).
  if (iequals(name, "add")) return ReduceOp::sum;
  if (iequals(name, "mul") || iequals(name, "product")) return ReduceOp::prod;
  if (iequals(name, "mean") || iequals(name, "average")) return ReduceOp::avg;
  return std::nullopt;
}

}  // namespace tpf
