// Element type and reduction operator metadata: sizes, names, parsing, invalid values.
#include "tpf/dtype.h"

#include <gtest/gtest.h>

#include <string>

#include "tpf/error.h"

namespace tpf {
namespace {

TEST(DTypeTest, SizesAndKinds) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) EXPECT_TRUE(is_floating(d));
  for (DType d : {DType::i8, DType::u8, DType::i32, DType::i64}) EXPECT_FALSE(is_floating(d));
}

TEST(DTypeTest, InvalidValues) {
  const auto bad = static_cast<DType>(99);
  EXPECT_FALSE(is_valid(bad));
  EXPECT_FALSE(is_valid(static_cast<DType>(kNumDTypes)));
  EXPECT_FALSE(is_valid(static_cast<ReduceOp>(kNumReduceOps)));
  EXPECT_FALSE(is_floating(bad));
  EXPECT_STREQ(dtype_name(bad), "invalid");
  EXPECT_STREQ(reduce_op_name(static_cast<ReduceOp>(42)), "invalid");
  try {
    dtype_size(bad);
    FAIL() << "dtype_size accepted an invalid dtype";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
  }
}

TEST(DTypeTest, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_TRUE(is_valid(d));
    EXPECT_EQ(parse_dtype(dtype_name(d)), d) << dtype_name(d);
  }
  for (int i = 0; i < kNumReduceOps; ++i) {
    const auto op = static_cast<ReduceOp>(i);
    EXPECT_TRUE(is_valid(op));
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op) << reduce_op_name(op);
  }
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(reduce_op_name(ReduceOp::avg), "avg");
}

TEST(DTypeTest, ParseAliases) {
  EXPECT_EQ(parse_dtype("float"), DType::f32);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("FP32"), DType::f32);
  EXPECT_EQ(parse_dtype("double"), DType::f64);
  EXPECT_EQ(parse_dtype("float64"), DType::f64);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("BF16"), DType::bf16);
  EXPECT_EQ(parse_dtype("int8"), DType::i8);
  EXPECT_EQ(parse_dtype("uint8"), DType::u8);
  EXPECT_EQ(parse_dtype("int32"), DType::i32);
  EXPECT_EQ(parse_dtype("int"), DType::i32);
  EXPECT_EQ(parse_dtype("int64"), DType::i64);
  EXPECT_EQ(parse_dtype("long"), DType::i64);
  EXPECT_EQ(parse_dtype(""), std::nullopt);
  EXPECT_EQ(parse_dtype("f8"), std::nullopt);
  EXPECT_EQ(parse_dtype("float32 "), std::nullopt);
  EXPECT_EQ(parse_reduce_op("SUM"), ReduceOp::sum);
  EXPECT_EQ(parse_reduce_op("mean"), ReduceOp::avg);
  EXPECT_EQ(parse_reduce_op("product"), ReduceOp::prod);
  EXPECT_EQ(parse_reduce_op("median"), std::nullopt);
}

}  // namespace
}  // namespace tpf
