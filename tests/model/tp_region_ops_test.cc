// Region operators of the tensor-parallel layer: every forward/backward pair is adjoint,
// <f(x), g> = <x, f*(g)>, in f64 for T in {1, 2, 3, 4}; layouts are enforced with clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "parallel/layer_norm.h"
#include "parallel/region_ops.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tensor/counter_rng.h"

namespace tpf::testing {
namespace {

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(20000);
  return o;
}

constexpr int64_t kRowsPerRank = 2;
constexpr int64_t kColsPerRank = 3;

// A tensor in placement p of the global [2T, 3T] tensor. Replicated values must agree across
// ranks (drawn from the salt alone); shards and partial addends differ per rank.
ParallelTensor random_tensor(const Placement& p, int rank, int size, uint64_t salt) {
  int64_t rows = kRowsPerRank * size, cols = kColsPerRank * size;
  if (p == Placement::shard(0)) rows /= size;
  if (p == Placement::shard(1)) cols /= size;
  const bool replicated = p.kind() == Placement::Kind::replicate;
  const RngKey key{salt, replicated ? 0u : static_cast<uint64_t>(rank + 1)};
  ParallelTensor t{Tensor({rows, cols}, DType::f64), p};
  for (int64_t i = 0; i < t.local.numel(); ++i) {
    t.local.f64()[i] = counter_normal(key, static_cast<uint64_t>(i));
  }
  return t;
}

// The pairing of a tensor with a gradient: local dot products summed over the ranks, counted once
// when both are replicated (every rank then holds the same whole value).
double pairing(Communicator& comm, const ParallelTensor& a, const ParallelTensor& b) {
  if (a.local.shape() != b.local.shape()) {
    throw ChildCheckFailure("pairing of shapes " + shape_string(a.local.shape()) + " and " +
                            shape_string(b.local.shape()));
  }
  double dot = 0;
  for (int64_t i = 0; i < a.local.numel(); ++i) dot += a.local.f64()[i] * b.local.f64()[i];
  if (a.placement.kind() == Placement::Kind::replicate &&
      b.placement.kind() == Placement::Kind::replicate) {
    dot /= comm.size();
  }
  comm.all_reduce(&dot, &dot, 1, DType::f64, ReduceOp::sum);
  return dot;
}

struct RegionPair {
  std::string name;
  Placement x_placement;   // forward input
  Placement y_placement;   // forward output
  Placement g_placement;   // gradient of the forward output
  Placement dx_placement;  // backward output (gradient of the forward input)
  std::function<ParallelTensor(Communicator&, const ParallelTensor&)> forward;
  std::function<ParallelTensor(Communicator&, const ParallelTensor&)> backward;
};

std::vector<RegionPair> region_pairs() {
  const Placement rep = Placement::replicate(), part = Placement::partial();
  std::vector<RegionPair> pairs = {
      {"copy_to_tp", rep, rep, part, rep,
       [](Communicator& c, const ParallelTensor& x) { return copy_to_tp_forward(c, x); },
       [](Communicator& c, const ParallelTensor& g) { return copy_to_tp_backward(c, g); }},
      {"reduce_from_tp", part, rep, rep, rep,
       [](Communicator& c, const ParallelTensor& x) { return reduce_from_tp_forward(c, x); },
       [](Communicator& c, const ParallelTensor& g) { return reduce_from_tp_backward(c, g); }},
      {"gather_from_sequence", Placement::shard(0), rep, part, Placement::shard(0),
       [](Communicator& c, const ParallelTensor& x) { return gather_from_sequence_forward(c, x); },
       [](Communicator& c, const ParallelTensor& g) {
         return gather_from_sequence_backward(c, g);
       }},
      {"reduce_scatter_to_sequence", part, Placement::shard(0), Placement::shard(0), rep,
       [](Communicator& c, const ParallelTensor& x) {
         return reduce_scatter_to_sequence_forward(c, x);
       },
       [](Communicator& c, const ParallelTensor& g) {
         return reduce_scatter_to_sequence_backward(c, g);
       }}};
  for (int dim : {0, 1}) {
    const std::string d = "(" + std::to_string(dim) + ")";
    pairs.push_back({"scatter_to_tp" + d, rep, Placement::shard(dim), Placement::shard(dim), rep,
                     [dim](Communicator& c, const ParallelTensor& x) {
                       return scatter_to_tp_forward(c, x, dim);
                     },
                     [dim](Communicator& c, const ParallelTensor& g) {
                       return scatter_to_tp_backward(c, g, dim);
                     }});
    pairs.push_back({"gather_from_tp" + d, Placement::shard(dim), rep, rep, Placement::shard(dim),
                     [dim](Communicator& c, const ParallelTensor& x) {
                       return gather_from_tp_forward(c, x, dim);
                     },
                     [dim](Communicator& c, const ParallelTensor& g) {
                       return gather_from_tp_backward(c, g, dim);
                     }});
  }
  return pairs;
}

class RegionOps : public ::testing::TestWithParam<int> {};

TEST_P(RegionOps, EveryPairIsAdjointInF64) {
  expect_all_ok(run_ranks(
      GetParam(),
      [](Communicator& comm) {
        uint64_t salt = 1;
        for (const RegionPair& pair : region_pairs()) {
          for (int trial = 0; trial < 3; ++trial, ++salt) {
            const ParallelTensor x =
                random_tensor(pair.x_placement, comm.rank(), comm.size(), salt);
            const ParallelTensor g =
                random_tensor(pair.g_placement, comm.rank(), comm.size(), salt + 1000);
            const ParallelTensor fx = pair.forward(comm, x);
            const ParallelTensor bg = pair.backward(comm, g);
            TPF_CHILD_CHECK(fx.placement == pair.y_placement,
                            pair.name + ": forward gives " + fx.placement.to_string());
            TPF_CHILD_CHECK(bg.placement == pair.dx_placement,
                            pair.name + ": backward gives " + bg.placement.to_string());
            const double lhs = pairing(comm, fx, g);
            const double rhs = pairing(comm, x, bg);
            TPF_CHILD_CHECK(std::abs(lhs - rhs) <= 1e-12 * (1 + std::abs(lhs)),
                            pair.name + ": <f(x), g> = " + std::to_string(lhs) +
                                " but <x, f*(g)> = " + std::to_string(rhs));
          }
        }
      },
      run_options()));
}

INSTANTIATE_TEST_SUITE_P(Sizes, RegionOps, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "T" + std::to_string(info.param); });

TEST(RegionOpsLayouts, WrongPlacementsAreRefusedWithTheirNames) {
  expect_all_ok(run_ranks(
      2,
      [](Communicator& comm) {
        const ParallelTensor rep = random_tensor(Placement::replicate(), comm.rank(), 2, 1);
        const ParallelTensor part = random_tensor(Placement::partial(), comm.rank(), 2, 2);
        Error e = expect_error("reduce of a replicated tensor",
                               [&] { reduce_from_tp_forward(comm, rep); });
        TPF_CHILD_CHECK(std::string(e.what()).find(
                            "reduce_from_tp (forward): expects a partial input, got a replicate") !=
                            std::string::npos,
                        e.what());
        // A LayerNorm of a partial sum is refused before any arithmetic.
        TpGroup tp{&comm};
        ReplicatedLayerNorm ln("ln_test", 6);
        ParallelTensor part_f32{Tensor({4, 6}), Placement::partial()};
        e = expect_error("LayerNorm of a partial sum", [&] { ln.forward(tp, part_f32); });
        TPF_CHILD_CHECK(std::string(e.what()).find(
                            "LayerNorm ln_test.weight: expects a replicate input, got a partial") !=
                            std::string::npos,
                        e.what());
        TPF_CHILD_CHECK(std::string(e.what()).find("must be reduced first") != std::string::npos,
                        e.what());
        // Shards must divide evenly.
        ParallelTensor odd{Tensor({3, 5}, DType::f64), Placement::replicate()};
        e = expect_error("split of 5 columns over 2", [&] { scatter_to_tp_forward(comm, odd, 1); });
        TPF_CHILD_CHECK(
            std::string(e.what()).find("does not split into 2 equal shards") != std::string::npos,
            e.what());
        (void)part;
      },
      run_options()));
}

}  // namespace
}  // namespace tpf::testing
