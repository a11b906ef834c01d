// The whole tensor-parallel GPT: one training step at T = 2 and T = 4 equals T = 1 (loss and every
// gradient, gathered to full tensors), with and without sequence parallelism and dropout;
// replicated values (loss, LayerNorm gradients) are bit-identical on every rank.
//
// Tolerance: gradients agree to 2e-5 of the tensor's largest element. All arithmetic is fp32
// (unit roundoff 6e-8); TP changes only the order of summation (row-parallel products are split
// into T partial sums and reduced in rank order), so the expected difference is a few hundred
// roundoffs at most after two layers. Measured differences are reported by the test on failure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/optimizer.h"
#include "model/text_data.h"
#include "parallel/gather_parameter.h"
#include "support/multiproc.h"

namespace tpf::testing {
namespace {

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(30000);
  o.deadline = std::chrono::milliseconds(90000);
  return o;
}

ModelConfig tiny_model(float dropout) {
  ModelConfig m;
  m.layers = 2;
  m.heads = 4;
  m.width = 64;
  m.context = 32;
  m.dropout = dropout;
  return m;
}

const char* kText =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the winter "
    "of despair.";

struct StepResult {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> grads;  // whole tensors, real vocabulary rows only
};

// Layout of the shared block: loss (double), then each gradient's floats in parameter order.
StepResult one_step(int tp_size, bool sequence_parallel, float dropout) {
  SharedBlock shared(8 << 20);
  const ModelConfig config = tiny_model(dropout);
  expect_all_ok(run_ranks(
      tp_size,
      [&](Communicator& comm) {
        TpGroup tp{&comm, sequence_parallel};
        Gpt model(config, comm.rank(), comm.size(), /*seed=*/7);
        const TextData data(kText, config.context, "test text");
        std::vector<int32_t> inputs, targets;
        data.batch(/*seed=*/3, /*step=*/0, /*micro=*/0, /*batch=*/4, inputs, targets);
        const double loss = model.forward(tp, inputs, targets, 4, 1.0, RngKey{11, 0});
        model.backward(tp);
        reduce_sequence_parallel_grads(tp, model.parameters());

        // Replicated values are bit-identical across ranks: compare every rank's bytes with rank
        // 0's.
        std::vector<double> losses(static_cast<size_t>(comm.size()));
        comm.all_gather(&loss, losses.data(), 1, DType::f64);
        for (double l : losses)
          TPF_CHILD_CHECK(std::memcmp(&l, &loss, sizeof l) == 0, "loss differs between ranks");
        for (const Parameter* p : model.parameters()) {
          if (!p->shard.replicated()) continue;
          Tensor root = p->grad;
          comm.broadcast(root.data(), root.data(), static_cast<size_t>(root.numel()), DType::f32,
                         0);
          TPF_CHILD_CHECK(std::memcmp(root.data(), p->grad.data(), root.bytes()) == 0,
                          p->name + ": replicated gradient differs from rank 0's");
        }

        // ... and stay so through an optimizer step (LayerNorm weights, biases, positions).
        {
          Gpt stepped(config, comm.rank(), comm.size(), 7);
          for (size_t i = 0; i < stepped.parameters().size(); ++i) {
            stepped.parameters()[i]->grad = model.parameters()[i]->grad;
          }
          AdamW adam(stepped.parameters(), TrainConfig{});
          adam.step(1e-3, 1.0);
          for (const Parameter* p : stepped.parameters()) {
            if (!p->shard.replicated()) continue;
            Tensor root = p->value;
            comm.broadcast(root.data(), root.data(), static_cast<size_t>(root.numel()), DType::f32,
                           0);
            TPF_CHILD_CHECK(std::memcmp(root.data(), p->value.data(), root.bytes()) == 0,
                            p->name + ": replicated value differs from rank 0's after a step");
          }
        }

        auto* out = static_cast<std::byte*>(shared.data());
        size_t at = 64;
        for (const Parameter* p : model.parameters()) {
          const Tensor whole = gather_global(tp, *p, p->grad);
          // Padded vocabulary rows are not part of the model; their count depends on T.
          const size_t n = p->name == "wte.weight"
                               ? static_cast<size_t>(config.vocab * config.width)
                               : static_cast<size_t>(whole.numel());
          if (comm.rank() == 0) {
            TPF_CHILD_CHECK(at + n * 4 <= shared.size(), "shared block too small");
            std::memcpy(out + at, whole.data(), n * 4);
          }
          at += n * 4;
        }
        if (comm.rank() == 0) std::memcpy(out, &loss, sizeof loss);
      },
      run_options()));

  StepResult r;
  const auto* in = static_cast<const std::byte*>(shared.data());
  std::memcpy(&r.loss, in, sizeof r.loss);
  Gpt shapes(config, 0, 1, 7);
  size_t at = 64;
  for (const Parameter* p : shapes.parameters()) {
    std::vector<float> g(static_cast<size_t>(p->value.numel()));
    std::memcpy(g.data(), in + at, g.size() * 4);
    at += g.size() * 4;
    r.names.push_back(p->name);
    r.grads.push_back(std::move(g));
  }
  return r;
}

void expect_same_step(const StepResult& want, const StepResult& got, const std::string& what) {
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss)) << what;
  ASSERT_EQ(want.grads.size(), got.grads.size());
  double worst = 0;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    double max_ref = 0, max_diff = 0;
    for (size_t j = 0; j < want.grads[i].size(); ++j) {
      max_ref = std::max(max_ref, std::abs(double(want.grads[i][j])));
      max_diff = std::max(max_diff, std::abs(double(want.grads[i][j]) - got.grads[i][j]));
    }
    EXPECT_GT(max_ref, 0) << what << ": " << want.names[i] << " has a zero gradient";
    const double rel = max_diff / std::max(max_ref, 1e-30);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 2e-5) << what << ": " << want.names[i] << " max|diff| " << max_diff
                         << " max|ref| " << max_ref;
  }
  std::printf("%s: loss %.9f vs %.9f, worst gradient difference %.3g of the largest element\n",
              what.c_str(), got.loss, want.loss, worst);
}

TEST(TensorParallelGpt, OneStepAtT2AndT4EqualsT1) {
  const StepResult t1 = one_step(1, false, 0.0f);
  EXPECT_GT(t1.loss, 4.0);  // about ln 256 = 5.55 at initialization
  EXPECT_LT(t1.loss, 7.0);
  expect_same_step(t1, one_step(2, false, 0.0f), "T=2");
  expect_same_step(t1, one_step(4, false, 0.0f), "T=4");
}

TEST(TensorParallelGpt, SequenceParallelStepEqualsT1) {
  const StepResult t1 = one_step(1, false, 0.0f);
  expect_same_step(t1, one_step(2, true, 0.0f), "T=2 sequence parallel");
  expect_same_step(t1, one_step(4, true, 0.0f), "T=4 sequence parallel");
}

TEST(TensorParallelGpt, DropoutDropsTheSameElementsAtEveryTpSize) {
  const StepResult t1 = one_step(1, false, 0.1f);
  const StepResult no_dropout = one_step(1, false, 0.0f);
  EXPECT_NE(t1.loss, no_dropout.loss);  // dropout is on
  expect_same_step(t1, one_step(4, false, 0.1f), "T=4 dropout");
  expect_same_step(t1, one_step(2, true, 0.1f), "T=2 sequence parallel dropout");
}

// Gradient accumulation: two micro-batches with loss_scale 1/2 each give the gradient of the
// mean loss over both, i.e. of one batch holding all their sequences.
TEST(TensorParallelGpt, AccumulatedMicroBatchesEqualOneLargeBatch) {
  expect_all_ok(run_ranks(
      2,
      [](Communicator& comm) {
        TpGroup tp{&comm};
        const ModelConfig config = tiny_model(0.0f);
        const TextData data(kText, config.context, "test text");
        std::vector<int32_t> in_a, tg_a, in_b, tg_b;
        data.batch(3, 0, 0, 2, in_a, tg_a);
        data.batch(3, 0, 1, 2, in_b, tg_b);
        Gpt accumulated(config, comm.rank(), comm.size(), 7);
        accumulated.forward(tp, in_a, tg_a, 2, 0.5, RngKey{});
        accumulated.backward(tp);
        accumulated.forward(tp, in_b, tg_b, 2, 0.5, RngKey{});
        accumulated.backward(tp);
        Gpt whole(config, comm.rank(), comm.size(), 7);
        std::vector<int32_t> in = in_a, tg = tg_a;
        in.insert(in.end(), in_b.begin(), in_b.end());
        tg.insert(tg.end(), tg_b.begin(), tg_b.end());
        whole.forward(tp, in, tg, 4, 1.0, RngKey{});
        whole.backward(tp);
        for (size_t i = 0; i < whole.parameters().size(); ++i) {
          const Tensor& a = accumulated.parameters()[i]->grad;
          const Tensor& b = whole.parameters()[i]->grad;
          float max_ref = 0, max_diff = 0;
          for (int64_t j = 0; j < a.numel(); ++j) {
            max_ref = std::max(max_ref, std::abs(b.f32()[j]));
            max_diff = std::max(max_diff, std::abs(a.f32()[j] - b.f32()[j]));
          }
          TPF_CHILD_CHECK(max_diff <= 1e-5f * max_ref, whole.parameters()[i]->name +
                                                           ": accumulated gradient differs by " +
                                                           std::to_string(max_diff));
        }
      },
      run_options()));
}

}  // namespace
}  // namespace tpf::testing
