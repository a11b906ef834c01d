// The reducing collectives (all_reduce, reduce, reduce_scatter) over every dtype x op x size class
// x rank count, compared bit for bit with the serial reference in support/coll_reference.cc.
// One test per (collective, N): the whole dtype/op/size matrix runs inside the same N processes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "support/coll_reference.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/half.h"

namespace tpf::testing {
namespace {

using Inputs = std::vector<std::vector<uint8_t>>;

Inputs all_inputs(DType dt, ReduceOp op, size_t count, int n, uint64_t salt) {
  Inputs in;
  for (int r = 0; r < n; ++r) in.push_back(make_input(dt, op, count, r, salt));
  return in;
}

// Counts to try for one block: the small classes, plus ~5 MiB in total for a few dtypes with sum.
std::vector<size_t> counts_for(DType dt, ReduceOp op, int blocks) {
  std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
  if (is_large_dtype(dt) && op == ReduceOp::sum) {
    counts.push_back(kLargeBytes / element_size(dt) / static_cast<size_t>(blocks) + 3);
  }
  return counts;
}

// Runs one library call, turning a tpf::Error into a failure that names the case. After an error
// the ranks may be out of step, so the run stops here.
template <class F>
void call(const std::string& name, F&& f) {
  // TPF_TEST_TRACE=1 prints each case before it runs: shows where a crashing rank was.
  static const bool trace = std::getenv("TPF_TEST_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "[trace] %s\n", name.c_str());
  try {
    f();
  } catch (const Error& e) {
    throw ChildCheckFailure(name + ": tpf::Error(" + error_code_name(e.code()) + "): " + e.what());
  }
}

CommOptions test_comm_options() {
  CommOptions o;
  o.timeout = std::chrono::milliseconds(20000);  // a hang becomes a timeout, within the harness deadline
  return o;
}

RunOptions run_options() {
  RunOptions o;
  o.comm_options = test_comm_options();
  return o;
}

std::string n_name(const ::testing::TestParamInfo<int>& info) {
  return "N" + std::to_string(info.param);
}

void all_reduce_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  FailureLog log;
  uint64_t salt = 1000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (ReduceOp op : kAllOps) {
      for (size_t count : counts_for(dt, op, 1)) {
        // Inputs and reference are shared by the out-of-place and in-place runs.
        const Inputs in = all_inputs(dt, op, count, n, ++salt);
        const auto want = reference_reduce(dt, op, in, 0, count);
        for (bool in_place : {false, true}) {
          const auto name = case_name("all_reduce", dt, static_cast<int>(op), count, in_place, -1, me, n);
          std::vector<uint8_t> send = in[static_cast<size_t>(me)];
          GuardedBuffer out(count * es);
          if (in_place) {
            if (count > 0) std::memcpy(out.data(), send.data(), count * es);
            call(name, [&] { comm.all_reduce(out.data(), out.data(), count, dt, op); });
          } else {
            call(name, [&] { comm.all_reduce(send.data(), out.data(), count, dt, op); });
            if (send != in[static_cast<size_t>(me)]) log.add(name + ": the send buffer was modified");
          }
          auto diff = compare_elements(dt, out.data(), want.data(), count);
          if (!diff.empty()) log.add(name + ": " + diff);
          if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
        }
      }
    }
  }
  log.throw_if_any("all_reduce");
}

void reduce_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  FailureLog log;
  uint64_t salt = 2000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (ReduceOp op : kAllOps) {
      for (size_t count : counts_for(dt, op, 1)) {
        const Inputs in = all_inputs(dt, op, count, n, ++salt);
        const auto want = reference_reduce(dt, op, in, 0, count);
        for (bool in_place : {false, true}) {
          // Every rank gets a turn as the root.
          const int root = static_cast<int>((salt + (in_place ? 1 : 0)) % static_cast<uint64_t>(n));
          const auto name = case_name("reduce", dt, static_cast<int>(op), count, in_place, root, me, n);
          std::vector<uint8_t> send = in[static_cast<size_t>(me)];
          GuardedBuffer out(count * es);
          if (in_place) {
            if (count > 0) std::memcpy(out.data(), send.data(), count * es);
            call(name, [&] { comm.reduce(out.data(), out.data(), count, dt, op, root); });
          } else {
            call(name, [&] { comm.reduce(send.data(), out.data(), count, dt, op, root); });
            if (send != in[static_cast<size_t>(me)]) log.add(name + ": the send buffer was modified");
          }
          if (me == root) {
            auto diff = compare_elements(dt, out.data(), want.data(), count);
            if (!diff.empty()) log.add(name + ": " + diff);
          }
          if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
        }
      }
    }
  }
  log.throw_if_any("reduce");
}

void reduce_scatter_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const size_t un = static_cast<size_t>(n), ume = static_cast<size_t>(me);
  FailureLog log;
  uint64_t salt = 3000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (ReduceOp op : kAllOps) {
      for (size_t rc : counts_for(dt, op, n)) {
        const Inputs in = all_inputs(dt, op, rc * un, n, ++salt);
        const auto want = reference_reduce(dt, op, in, ume * rc, rc);
        for (bool in_place : {false, true}) {
          const auto name = case_name("reduce_scatter", dt, static_cast<int>(op), rc, in_place, -1, me, n);
          std::vector<uint8_t> send = in[ume];
          if (in_place) {
            GuardedBuffer buf(un * rc * es);
            if (rc > 0) std::memcpy(buf.data(), send.data(), un * rc * es);
            uint8_t* mine = buf.data() + ume * rc * es;
            call(name, [&] { comm.reduce_scatter(buf.data(), mine, rc, dt, op); });
            auto diff = compare_elements(dt, mine, want.data(), rc);
            if (!diff.empty()) log.add(name + ": " + diff);
            if (!buf.guards_intact()) log.add(name + ": wrote outside the buffer");
          } else {
            GuardedBuffer out(rc * es);
            call(name, [&] { comm.reduce_scatter(send.data(), out.data(), rc, dt, op); });
            if (send != in[ume]) log.add(name + ": the send buffer was modified");
            auto diff = compare_elements(dt, out.data(), want.data(), rc);
            if (!diff.empty()) log.add(name + ": " + diff);
            if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
          }
        }
      }
    }
  }
  log.throw_if_any("reduce_scatter");
}

class AllReduceTest : public ::testing::TestWithParam<int> {};
TEST_P(AllReduceTest, EveryDTypeOpAndSizeMatchesSerialReference) {
  expect_all_ok(run_ranks(GetParam(), all_reduce_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, AllReduceTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class ReduceTest : public ::testing::TestWithParam<int> {};
TEST_P(ReduceTest, EveryDTypeOpSizeAndRootMatchesSerialReference) {
  expect_all_ok(run_ranks(GetParam(), reduce_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, ReduceTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class ReduceScatterTest : public ::testing::TestWithParam<int> {};
TEST_P(ReduceScatterTest, EveryDTypeOpAndSizeMatchesSerialReference) {
  expect_all_ok(run_ranks(GetParam(), reduce_scatter_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, ReduceScatterTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

// The reference itself, on values worked out by hand: if it were wrong, every test above would be.
TEST(SerialReference, HandWorkedValues) {
  auto one = [](DType dt, ReduceOp op, std::vector<std::vector<uint8_t>> in) {
    return reference_reduce(dt, op, in, 0, 1);
  };
  auto bytes_of = [](auto v) {
    std::vector<uint8_t> b(sizeof v);
    std::memcpy(b.data(), &v, sizeof v);
    return b;
  };
  // i8 sum wraps: 100 + 100 = 200 -> -56.
  EXPECT_EQ(one(DType::i8, ReduceOp::sum, {bytes_of(int8_t{100}), bytes_of(int8_t{100})}),
            bytes_of(int8_t{-56}));
  // i32 avg truncates toward zero: (-7 + 0) / 2 = -3.
  EXPECT_EQ(one(DType::i32, ReduceOp::avg, {bytes_of(int32_t{-7}), bytes_of(int32_t{0})}),
            bytes_of(int32_t{-3}));
  // u8 prod wraps: 16 * 16 = 256 -> 0.
  EXPECT_EQ(one(DType::u8, ReduceOp::prod, {bytes_of(uint8_t{16}), bytes_of(uint8_t{16})}),
            bytes_of(uint8_t{0}));
  // f16 accumulates in f32 and rounds once: 1 + 2^-11 + 2^-11 = 1 + 2^-10 exactly (an f16 value),
  // whereas rounding after each step would give 1 (ties to even) + ... = 1.
  const uint16_t h1 = 0x3C00, heps = f32_to_f16(0x1.0p-11f);
  EXPECT_EQ(one(DType::f16, ReduceOp::sum, {bytes_of(h1), bytes_of(heps), bytes_of(heps)}),
            bytes_of(uint16_t{0x3C01}));
  // max propagates NaN from any position.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto got = one(DType::f32, ReduceOp::max, {bytes_of(1.0f), bytes_of(nan), bytes_of(2.0f)});
  float v;
  std::memcpy(&v, got.data(), 4);
  EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace tpf::testing
