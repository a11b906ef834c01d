// Every parallel layer against a plain serial implementation at T in {1, 2, 4}, with and without
// sequence parallelism: outputs, input gradients and every parameter gradient, gathered to whole
// tensors. The reference is each layer's forward pass written here from its definition, in f64
// loops; its gradients are central differences of <forward(x), dy> (step 1e-5: truncation ~1e-10,
// rounding ~1e-11), so no backward pass is shared with the code under test.
//
// Tolerance: 1e-5 of the largest element of each tensor. The layers compute in fp32 with
// differently ordered sums (GEMM blocking, T partial sums); inputs are O(1) and reductions are at
// most a few hundred terms long, so their errors are ~1e-7 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/gather_parameter.h"
#include "parallel/layer_norm.h"
#include "parallel/linear.h"
#include "parallel/mlp.h"
#include "parallel/region_ops.h"
#include "parallel/self_attention.h"
#include "parallel/vocab_parallel.h"
#include "support/multiproc.h"

namespace tpf::testing {
namespace {

using Vec = std::vector<double>;

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(30000);
  return o;
}

constexpr uint64_t kSeed = 21;
constexpr int64_t kRows = 8;  // batch 2 x sequence 4
constexpr int64_t kBatch = 2, kSeq = 4;
constexpr int64_t kWidth = 16;
constexpr int64_t kHeads = 4;

Tensor random_matrix(int64_t rows, int64_t cols, uint64_t stream, float scale = 1.0f) {
  Tensor t({rows, cols});
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.f32()[i] = scale * counter_normal(RngKey{kSeed, stream}, static_cast<uint64_t>(i));
  }
  return t;
}

Vec to_vec(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

// The whole tensor behind a ParallelTensor (blocks: a fused column layout, as QKV's).
Tensor whole(TpGroup& tp, const ParallelTensor& x, int blocks = 1) {
  switch (x.placement.kind()) {
    case Placement::Kind::replicate: return x.local;
    case Placement::Kind::partial: {
      Tensor t = x.local;
      all_reduce_in_place(*tp.comm, t);
      return t;
    }
    case Placement::Kind::shard: {
      Parameter spec;
      spec.shard = ShardSpec{x.placement.dim(), blocks};
      return gather_global(tp, spec, x.local);
    }
  }
  return {};
}

// The layer's input in the activation placement.
ParallelTensor activation(TpGroup& tp, const Tensor& full) {
  if (!tp.sequence_parallel) return ParallelTensor{full, Placement::replicate()};
  return ParallelTensor{split_along(full, 0, tp.rank(), tp.size()), Placement::shard(0)};
}

// Runs body on T ranks; rank 0's tensors come back as f64 vectors.
std::vector<Vec> run_collect(int tp_size, bool sequence_parallel,
                             const std::function<std::vector<Tensor>(TpGroup&)>& body) {
  SharedBlock shared(4 << 20);
  expect_all_ok(run_ranks(
      tp_size,
      [&](Communicator& comm) {
        TpGroup tp{&comm, sequence_parallel};
        const std::vector<Tensor> out = body(tp);
        if (comm.rank() != 0) return;
        auto* p = static_cast<std::byte*>(shared.data());
        int64_t count = static_cast<int64_t>(out.size());
        std::memcpy(p, &count, 8);
        size_t at = 8;
        for (const Tensor& t : out) {
          const int64_t n = t.numel();
          TPF_CHILD_CHECK(at + 8 + t.bytes() <= shared.size(), "shared block too small");
          std::memcpy(p + at, &n, 8);
          std::memcpy(p + at + 8, t.data(), t.bytes());
          at += 8 + t.bytes();
        }
      },
      run_options()));
  std::vector<Vec> result;
  const auto* p = static_cast<const std::byte*>(shared.data());
  int64_t count = 0;
  std::memcpy(&count, p, 8);
  size_t at = 8;
  for (int64_t i = 0; i < count; ++i) {
    int64_t n = 0;
    std::memcpy(&n, p + at, 8);
    std::vector<float> f(static_cast<size_t>(n));
    std::memcpy(f.data(), p + at + 8, f.size() * 4);
    result.emplace_back(f.begin(), f.end());
    at += 8 + f.size() * 4;
  }
  return result;
}

void expect_close(const std::vector<Vec>& got, const std::vector<Vec>& want,
                  const std::vector<std::string>& names, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << what << ": " << names[i];
    double max_ref = 0, max_diff = 0;
    for (size_t j = 0; j < want[i].size(); ++j) {
      max_ref = std::max(max_ref, std::abs(want[i][j]));
      max_diff = std::max(max_diff, std::abs(want[i][j] - got[i][j]));
    }
    EXPECT_GT(max_ref, 0) << what << ": " << names[i] << " is all zero (a vacuous check)";
    EXPECT_LE(max_diff, 1e-5 * max_ref)
        << what << ": " << names[i] << " max|diff| " << max_diff << " max|ref| " << max_ref;
  }
}

// ---- The serial reference, f64 ----

// y[m, n] = x[m, k] w[k, n] + b.
Vec affine(const Vec& x, const Vec& w, const Vec& b, int64_t m, int64_t k, int64_t n) {
  Vec y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b[static_cast<size_t>(j)];
      for (int64_t l = 0; l < k; ++l) {
        s += x[static_cast<size_t>(i * k + l)] * w[static_cast<size_t>(l * n + j)];
      }
      y[static_cast<size_t>(i * n + j)] = s;
    }
  }
  return y;
}

Vec layer_norm(const Vec& x, const Vec& g, const Vec& b, int64_t m, int64_t n) {
  Vec y(x.size());
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[static_cast<size_t>(i * n + j)];
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += std::pow(x[static_cast<size_t>(i * n + j)] - mean, 2);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      const size_t at = static_cast<size_t>(i * n + j);
      y[at] = (x[at] - mean) / std::sqrt(var + 1e-5) * g[static_cast<size_t>(j)] +
              b[static_cast<size_t>(j)];
    }
  }
  return y;
}

Vec gelu(Vec x) {
  for (double& v : x)
    v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return x;
}

// Causal attention of [rows, 3 * width] = [q | k | v] into [rows, width].
Vec attention(const Vec& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t width) {
  const int64_t d = width / heads, ld = 3 * width;
  Vec out(static_cast<size_t>(batch * seq * width));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        const size_t qi = static_cast<size_t>((b * seq + i) * ld + h * d);
        Vec p(static_cast<size_t>(i + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const size_t kj = static_cast<size_t>((b * seq + j) * ld + width + h * d);
          double s = 0;
          for (int64_t c = 0; c < d; ++c)
            s += qkv[qi + static_cast<size_t>(c)] * qkv[kj + static_cast<size_t>(c)];
          p[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, p[static_cast<size_t>(j)]);
        }
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) {
            o += p[static_cast<size_t>(j)] / sum *
                 qkv[static_cast<size_t>((b * seq + j) * ld + 2 * width + h * d + c)];
          }
          out[static_cast<size_t>((b * seq + i) * width + h * d + c)] = o;
        }
      }
    }
  }
  return out;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d v by central differences.
Vec numeric_gradient(Vec& v, const std::function<double()>& loss) {
  constexpr double h = 1e-5;
  Vec g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// The reference outputs: forward(), then the gradient of <forward(), dy> (or of forward()[0] if
// dy is empty: a scalar loss) with respect to each of `wrt`.
std::vector<Vec> reference(const std::function<Vec()>& forward, const Vec& dy,
                           std::vector<Vec*> wrt) {
  std::vector<Vec> out = {forward()};
  auto loss = [&] { return dy.empty() ? forward()[0] : dot(forward(), dy); };
  for (Vec* v : wrt) out.push_back(numeric_gradient(*v, loss));
  return out;
}

Vec global_values(Parameter p) {
  initialize(p, kSeed, 0, 1);
  return to_vec(p.value);
}

// Biases and LayerNorm weights start at 0 / 1 in a model; random values make the checks sharper.
void randomize(std::vector<Parameter*> params) {
  for (Parameter* p : params) {
    if (p->init != Init::normal) {
      p->init = Init::normal;
      p->init_std = 0.3f;
    }
  }
}

void init_all(TpGroup& g, std::vector<Parameter*> params) {
  for (Parameter* p : params) initialize(*p, kSeed, g.rank(), g.size());
}

// ---- The cases ----

class Layers : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int tp() const { return std::get<0>(GetParam()); }
  bool sp() const { return std::get<1>(GetParam()); }
  std::string what() const {
    return "T=" + std::to_string(tp()) + (sp() ? " sequence parallel" : "");
  }
};

TEST_P(Layers, ColumnParallelLinearWithFusedBlocks) {
  static constexpr int64_t kOut = 3 * kWidth;
  auto make = [] {
    auto l = std::make_unique<ColumnParallelLinear>("col", kWidth, kOut, 3, 0.5f);
    randomize({&l->weight, &l->bias});
    return l;
  };
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    auto layer = make();
    init_all(g, {&layer->weight, &layer->bias});
    const ParallelTensor y = layer->forward(g, activation(g, random_matrix(kRows, kWidth, 1)));
    const ParallelTensor dx = layer->backward(
        g, ParallelTensor{
               slice_of_global(random_matrix(kRows, kOut, 2), ShardSpec{1, 3}, g.rank(), g.size()),
               Placement::shard(1)});
    return std::vector<Tensor>{whole(g, y, 3), whole(g, dx),
                               gather_global(g, layer->weight, layer->weight.grad),
                               gather_global(g, layer->bias, layer->bias.grad)};
  });
  auto serial = make();
  Vec x = to_vec(random_matrix(kRows, kWidth, 1)), w = global_values(serial->weight),
      b = global_values(serial->bias);
  const auto want = reference([&] { return affine(x, w, b, kRows, kWidth, kOut); },
                              to_vec(random_matrix(kRows, kOut, 2)), {&x, &w, &b});
  expect_close(got, want, {"y", "dx", "dW", "db"}, what());
}

TEST_P(Layers, RowParallelLinear) {
  static constexpr int64_t kIn = 2 * kWidth;
  auto make = [] {
    auto l = std::make_unique<RowParallelLinear>("row", kIn, kWidth, 0.5f);
    randomize({&l->weight, &l->bias});
    return l;
  };
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    auto layer = make();
    init_all(g, {&layer->weight, &layer->bias});
    const Tensor x = split_along(random_matrix(kRows, kIn, 3), 1, g.rank(), g.size());
    const ParallelTensor y = layer->forward(g, ParallelTensor{x, Placement::shard(1)});
    const ParallelTensor dx = layer->backward(g, activation(g, random_matrix(kRows, kWidth, 4)));
    // With sequence parallelism each rank's bias gradient covers its rows (summed by the trainer).
    if (layer->bias.grad_summed_over_tp) all_reduce_in_place(*g.comm, layer->bias.grad);
    return std::vector<Tensor>{whole(g, y), whole(g, dx),
                               gather_global(g, layer->weight, layer->weight.grad),
                               layer->bias.grad};
  });
  auto serial = make();
  Vec x = to_vec(random_matrix(kRows, kIn, 3)), w = global_values(serial->weight),
      b = global_values(serial->bias);
  const auto want = reference([&] { return affine(x, w, b, kRows, kIn, kWidth); },
                              to_vec(random_matrix(kRows, kWidth, 4)), {&x, &w, &b});
  expect_close(got, want, {"y", "dx", "dW", "db"}, what());
}

TEST_P(Layers, ReplicatedLayerNorm) {
  auto make = [] {
    auto l = std::make_unique<ReplicatedLayerNorm>("ln", kWidth);
    randomize({&l->weight, &l->bias});
    return l;
  };
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    auto layer = make();
    init_all(g, {&layer->weight, &layer->bias});
    const ParallelTensor y =
        layer->forward(g, activation(g, random_matrix(kRows, kWidth, 5, 2.0f)));
    const ParallelTensor dx = layer->backward(g, activation(g, random_matrix(kRows, kWidth, 6)));
    if (layer->weight.grad_summed_over_tp) {
      all_reduce_in_place(*g.comm, layer->weight.grad);
      all_reduce_in_place(*g.comm, layer->bias.grad);
    }
    return std::vector<Tensor>{whole(g, y), whole(g, dx), layer->weight.grad, layer->bias.grad};
  });
  auto serial = make();
  Vec x = to_vec(random_matrix(kRows, kWidth, 5, 2.0f)), w = global_values(serial->weight),
      b = global_values(serial->bias);
  const auto want = reference([&] { return layer_norm(x, w, b, kRows, kWidth); },
                              to_vec(random_matrix(kRows, kWidth, 6)), {&x, &w, &b});
  expect_close(got, want, {"y", "dx", "dgamma", "dbeta"}, what());
}

// A vocabulary that is not a multiple of 64 x T: padded rows exist on the last rank.
constexpr int64_t kVocab = 200;

std::vector<int32_t> some_tokens() {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < kRows; ++i) t.push_back(static_cast<int32_t>((i * 37 + 11) % kVocab));
  t[3] = kVocab - 1;  // the last real row
  return t;
}

TEST_P(Layers, VocabParallelEmbedding) {
  const std::vector<int32_t> tokens = some_tokens();
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    VocabParallelEmbedding layer("wte", kVocab, kWidth, g.size(), 0.5f);
    init_all(g, {&layer.weight});
    const ParallelTensor y = layer.forward(g, tokens);
    layer.backward(g, activation(g, random_matrix(kRows, kWidth, 7)));
    Tensor dw = gather_global(g, layer.weight, layer.weight.grad);
    dw.reshape({dw.numel()});
    Tensor real({kVocab * kWidth});
    std::memcpy(real.data(), dw.data(), real.bytes());
    return std::vector<Tensor>{whole(g, y), real};
  });
  VocabParallelEmbedding serial("wte", kVocab, kWidth, 1, 0.5f);
  Vec w = global_values(serial.weight);
  w.resize(static_cast<size_t>(kVocab * kWidth));
  const auto want = reference(
      [&] {
        Vec y(static_cast<size_t>(kRows * kWidth));
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t c = 0; c < kWidth; ++c)
            y[static_cast<size_t>(r * kWidth + c)] =
                w[static_cast<size_t>(tokens[static_cast<size_t>(r)] * kWidth + c)];
        return y;
      },
      to_vec(random_matrix(kRows, kWidth, 7)), {&w});
  expect_close(got, want, {"y", "dW"}, what());
}

TEST_P(Layers, VocabParallelCrossEntropy) {
  const std::vector<int32_t> targets = some_tokens();
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    VocabParallelEmbedding table("wte", kVocab, kWidth, g.size(), 0.5f);
    init_all(g, {&table.weight});
    VocabParallelCrossEntropy ce;
    Tensor loss({1});
    loss.f32()[0] = static_cast<float>(
        ce.forward(g, activation(g, random_matrix(kRows, kWidth, 8)), table, targets, 1.0));
    const ParallelTensor dh = ce.backward(g, table);
    Tensor dw = gather_global(g, table.weight, table.weight.grad);
    dw.reshape({dw.numel()});
    Tensor real({kVocab * kWidth});
    std::memcpy(real.data(), dw.data(), real.bytes());
    return std::vector<Tensor>{loss, whole(g, dh), real};
  });
  VocabParallelEmbedding serial("wte", kVocab, kWidth, 1, 0.5f);
  Vec w = global_values(serial.weight);
  w.resize(static_cast<size_t>(kVocab * kWidth));
  Vec h = to_vec(random_matrix(kRows, kWidth, 8));
  const auto want = reference(
      [&] {
        double total = 0;
        for (int64_t r = 0; r < kRows; ++r) {
          Vec logits(static_cast<size_t>(kVocab));
          double mx = -1e300, sum = 0;
          for (int64_t v = 0; v < kVocab; ++v) {
            double s = 0;
            for (int64_t c = 0; c < kWidth; ++c)
              s += h[static_cast<size_t>(r * kWidth + c)] * w[static_cast<size_t>(v * kWidth + c)];
            mx = std::max(mx, logits[static_cast<size_t>(v)] = s);
          }
          for (double l : logits) sum += std::exp(l - mx);
          total +=
              std::log(sum) + mx - logits[static_cast<size_t>(targets[static_cast<size_t>(r)])];
        }
        return Vec{total / kRows};
      },
      {}, {&h, &w});
  expect_close(got, want, {"loss", "dh", "dW"}, what());
}

TEST_P(Layers, ParallelSelfAttention) {
  auto make = [] {
    auto l = std::make_unique<ParallelSelfAttention>("attn", kWidth, kHeads, 1, 0.4f, 0.4f);
    randomize({&l->qkv.weight, &l->qkv.bias, &l->proj.weight, &l->proj.bias});
    return l;
  };
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    ParallelSelfAttention layer("attn", kWidth, kHeads, g.size(), 0.4f, 0.4f);
    std::vector<Parameter*> params;
    layer.collect(params);
    randomize(params);
    init_all(g, params);
    const ParallelTensor y = layer.forward(g, activation(g, random_matrix(kRows, kWidth, 9)),
                                           kBatch, kSeq, 0.0f, RngKey{});
    const ParallelTensor dx = layer.backward(g, activation(g, random_matrix(kRows, kWidth, 10)));
    if (layer.proj.bias.grad_summed_over_tp) all_reduce_in_place(*g.comm, layer.proj.bias.grad);
    std::vector<Tensor> out = {whole(g, y), whole(g, dx)};
    for (const Parameter* p : params) out.push_back(gather_global(g, *p, p->grad));
    return out;
  });
  auto serial = make();
  Vec x = to_vec(random_matrix(kRows, kWidth, 9)), wq = global_values(serial->qkv.weight),
      bq = global_values(serial->qkv.bias), wo = global_values(serial->proj.weight),
      bo = global_values(serial->proj.bias);
  const auto want = reference(
      [&] {
        const Vec ctx =
            attention(affine(x, wq, bq, kRows, kWidth, 3 * kWidth), kBatch, kSeq, kHeads, kWidth);
        return affine(ctx, wo, bo, kRows, kWidth, kWidth);
      },
      to_vec(random_matrix(kRows, kWidth, 10)), {&x, &wq, &bq, &wo, &bo});
  expect_close(got, want, {"y", "dx", "dWqkv", "dbqkv", "dWproj", "dbproj"}, what());
}

TEST_P(Layers, ParallelMlp) {
  static constexpr int64_t kHidden = 4 * kWidth;
  const auto got = run_collect(tp(), sp(), [&](TpGroup& g) {
    ParallelMlp layer("mlp", kWidth, kHidden, 0.4f, 0.4f);
    std::vector<Parameter*> params;
    layer.collect(params);
    randomize(params);
    init_all(g, params);
    const ParallelTensor y = layer.forward(g, activation(g, random_matrix(kRows, kWidth, 11)));
    const ParallelTensor dx = layer.backward(g, activation(g, random_matrix(kRows, kWidth, 12)));
    if (layer.proj.bias.grad_summed_over_tp) all_reduce_in_place(*g.comm, layer.proj.bias.grad);
    std::vector<Tensor> out = {whole(g, y), whole(g, dx)};
    for (const Parameter* p : params) out.push_back(gather_global(g, *p, p->grad));
    return out;
  });
  ParallelMlp serial("mlp", kWidth, kHidden, 0.4f, 0.4f);
  std::vector<Parameter*> params;
  serial.collect(params);
  randomize(params);
  Vec x = to_vec(random_matrix(kRows, kWidth, 11)), w1 = global_values(*params[0]),
      b1 = global_values(*params[1]), w2 = global_values(*params[2]),
      b2 = global_values(*params[3]);
  const auto want = reference(
      [&] {
        return affine(gelu(affine(x, w1, b1, kRows, kWidth, kHidden)), w2, b2, kRows, kHidden,
                      kWidth);
      },
      to_vec(random_matrix(kRows, kWidth, 12)), {&x, &w1, &b1, &w2, &b2});
  expect_close(got, want, {"y", "dx", "dWfc", "dbfc", "dWproj", "dbproj"}, what());
}

INSTANTIATE_TEST_SUITE_P(TpSizes, Layers,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "T" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_SequenceParallel" : "");
                         });

}  // namespace
}  // namespace tpf::testing
