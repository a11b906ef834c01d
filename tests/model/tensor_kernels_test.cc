// Building blocks of the model layer: fast exp/tanh against the C library, the counter-based RNG,
// tensors, parameter slicing (including fused QKV blocks), batches, the learning-rate schedule and
// configuration files.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/optimizer.h"
#include "model/text_data.h"
#include "parallel/parameter.h"
#include "tensor/counter_rng.h"
#include "tensor/fast_math.h"
#include "tensor/tensor.h"
#include "tpf/error.h"

namespace tpf {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(FastMath, ExpAndTanhAreWithinAFewUlpOfTheLibrary) {
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    worst_exp = std::max(worst_exp, std::abs(double(fast_exp(x)) / std::exp(double(x)) - 1));
  }
  for (float x = -12.0f; x <= 12.0f; x += 0.0009765625f) {
    // Absolute for tanh: near 0 it is computed as 1 - 2/(e^2x + 1), exact to ~1 ulp of 1.
    worst_tanh = std::max(worst_tanh, std::abs(double(fast_tanh(x)) - std::tanh(double(x))));
  }
  EXPECT_LT(worst_exp, 3e-7);
  EXPECT_LT(worst_tanh, 2e-7);
  EXPECT_EQ(fast_tanh(50.0f), 1.0f);
  EXPECT_EQ(fast_tanh(-50.0f), -1.0f);
  EXPECT_GT(fast_exp(-200.0f), 0.0f);  // clamped, not a denormal or garbage
}

TEST(CounterRng, IsAPureFunctionWithSensibleMoments) {
  const RngKey key{42, stream_of("w")};
  EXPECT_EQ(counter_bits(key, 7), counter_bits(key, 7));
  EXPECT_NE(counter_bits(key, 7), counter_bits(key, 8));
  EXPECT_NE(counter_bits(key, 7), counter_bits(RngKey{43, key.stream}, 7));
  EXPECT_NE(counter_bits(key, 7), counter_bits(key.derive(1), 7));
  double sum = 0, sq = 0, u = 0;
  constexpr int kN = 200000;
  for (int i = 0; i < kN; ++i) {
    const double z = counter_normal(key, static_cast<uint64_t>(i));
    sum += z;
    sq += z * z;
    u += counter_uniform(key, static_cast<uint64_t>(i));
  }
  EXPECT_NEAR(sum / kN, 0.0, 0.01);
  EXPECT_NEAR(sq / kN, 1.0, 0.01);
  EXPECT_NEAR(u / kN, 0.5, 0.005);
}

TEST(TensorType, ChecksShapesAndDTypes) {
  Tensor t({2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(t.f32()[5], 0.0f);  // zero-filled
  EXPECT_NE(error_of([&] { t.f64(); }).find("holds f32, not f64"), std::string::npos);
  EXPECT_NE(error_of([&] { t.reshape({4, 2}); }), "(no error)");  // 8 != 6
  t.reshape({3, 2});
  EXPECT_EQ(t.dim(0), 3);
  EXPECT_NE(error_of([&] { t.dim(2); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([] { Tensor bad({2, -1}); }).find("negative dimension"), std::string::npos);
  Tensor copy = t;  // deep
  copy.f32()[0] = 1;
  EXPECT_EQ(t.f32()[0], 0.0f);
}

TEST(ParameterSlices, FusedBlocksRoundTripAndMatchGlobalIndices) {
  Tensor global({4, 12});
  for (int64_t i = 0; i < global.numel(); ++i) global.f32()[i] = static_cast<float>(i);
  const ShardSpec qkv{1, 3};
  std::vector<Tensor> slices;
  for (int r = 0; r < 2; ++r) slices.push_back(slice_of_global(global, qkv, r, 2));
  // Rank 1 holds columns 2-3 of each block of 4: 2, 3, 6, 7, 10, 11 of row 0.
  EXPECT_EQ(slices[1].shape(), (Shape{4, 6}));
  const std::vector<float> row0(slices[1].f32(), slices[1].f32() + 6);
  EXPECT_EQ(row0, (std::vector<float>{2, 3, 6, 7, 10, 11}));
  const Tensor back = global_from_slices(slices, qkv);
  for (int64_t i = 0; i < global.numel(); ++i) EXPECT_EQ(back.f32()[i], global.f32()[i]);
  Parameter p;
  p.name = "qkv";
  p.global_shape = {4, 12};
  p.shard = qkv;
  const std::vector<int64_t> idx = global_indices(p, 1, 2);
  for (size_t i = 0; i < idx.size(); ++i)
    EXPECT_EQ(idx[i], static_cast<int64_t>(slices[1].f32()[i]));
  EXPECT_NE(error_of([&] { local_shape(p, 5); }).find("does not split over 5"), std::string::npos);
}

TEST(ParameterSlices, InitializationDoesNotDependOnTheTpSize) {
  Parameter p;
  p.name = "w";
  p.global_shape = {8, 6};
  p.shard = ShardSpec{0, 1};
  p.init = Init::normal;
  p.init_std = 1.0f;
  initialize(p, 3, 0, 1);
  const Tensor whole = p.value;
  std::vector<Tensor> slices;
  for (int r = 0; r < 4; ++r) {
    Parameter q = p;
    initialize(q, 3, r, 4);
    slices.push_back(q.value);
  }
  const Tensor back = global_from_slices(slices, p.shard);
  for (int64_t i = 0; i < whole.numel(); ++i) EXPECT_EQ(back.f32()[i], whole.f32()[i]);
}

TEST(TextBatches, AreDeterministicShiftedAndValidated) {
  const TextData data(std::string("abcdefghijklmnopqrstuvwxyz"), 4, "alphabet");
  std::vector<int32_t> in1, tg1, in2, tg2;
  data.batch(1, 5, 0, 3, in1, tg1);
  data.batch(1, 5, 0, 3, in2, tg2);
  EXPECT_EQ(in1, in2);
  for (size_t i = 0; i < in1.size(); ++i) EXPECT_EQ(tg1[i], in1[i] + 1);  // the next letter
  data.batch(1, 6, 0, 3, in2, tg2);
  EXPECT_NE(in1, in2);
  EXPECT_NE(error_of([] { TextData tiny(std::string("abc"), 4, "tiny.txt"); }).find("tiny.txt"),
            std::string::npos);
}

TEST(LearningRate, WarmsUpLinearlyThenDecaysByCosineToTheMinimum) {
  TrainConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup = 10;
  c.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_NEAR(learning_rate(c, 10 + 99 / 2.0), 0.55, 1e-2);
  EXPECT_DOUBLE_EQ(learning_rate(c, 109), 0.1);
}

TEST(ConfigFiles, PresetsOverridesAndErrorsNameTheKey) {
  const RunConfig c = parse_config(
      R"({"preset": "tiny", "model": {"layers": 3}, "train": {"lr": 1e-3}})", "x.json");
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.width, preset_config("tiny").model.width);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(parse_config(config_to_json(c), "round trip").model.layers, 3);
  EXPECT_NE(error_of([] {
              parse_config(R"({"model": {"layer": 3}})", "x.json");
            }).find("x.json model: \"layer\" is not a known setting"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_config(R"({"model": {"width": 30, "heads": 4}})", "x.json");
            }).find("multiple of heads"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_config(R"({"model": {"layers": "many"}})", "x.json");
            }).find("\"layers\""),
            std::string::npos);
  EXPECT_NE(error_of([] { preset_config("huge"); }).find("tiny"), std::string::npos);
}

}  // namespace
}  // namespace tpf
