// The 1F1B schedule: each stage's order by hand, and, simulated with unit-time forwards and
// two-unit backwards over P stages that wait for their neighbours, that it completes and idles
// exactly (P - 1) / (M + P - 1) of the time, as Narayanan et al. (2021) derive.
#include "model/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "support/expect_tpf_error.h"

namespace tpf::testing {
namespace {

TEST(PipelineSchedule, FirstStageWarmsUpThenAlternates) {
  EXPECT_EQ(describe(one_forward_one_backward(4, 0, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(describe(one_forward_one_backward(4, 2, 6)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(describe(one_forward_one_backward(4, 3, 3)), "F0 B0 F1 B1 F2 B2");
}

TEST(PipelineSchedule, FewerMicroBatchesThanStagesRunAllForwardsFirst) {
  EXPECT_EQ(describe(one_forward_one_backward(4, 0, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(describe(one_forward_one_backward(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
}

TEST(PipelineSchedule, BadPositionsAreRefused) {
  EXPECT_TPF_ERROR(one_forward_one_backward(2, 2, 4), ErrorCode::invalid_argument, "stage 2 of 2");
  EXPECT_TPF_ERROR(one_forward_one_backward(2, 0, 0), ErrorCode::invalid_argument,
                   "0 micro-batches");
}

// Runs every rank's passes in order: the forward of virtual stage v (chunk c of rank s is
// v = c P + s) waits for the forward of v - 1 of the same micro-batch, a backward for the backward
// of v + 1. Returns the time the last pass ends, or -1 if the ranks deadlock.
//
// It also checks what the trainer relies on to send without tags: between two ranks, in each
// direction, the messages (activations and gradients alike, as at P = 2 where both go each way)
// arrive in the order the receiver asks for them.
int64_t simulate(int stages, int chunks, int64_t micro_batches, int64_t forward_time,
                 int64_t backward_time) {
  using Kind = PipelinePass::Kind;
  std::vector<std::vector<PipelinePass>> passes;
  for (int s = 0; s < stages; ++s)
    passes.push_back(interleaved_one_forward_one_backward(stages, s, chunks, micro_batches));
  const int virtual_stages = stages * chunks;
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<int64_t> clock(static_cast<size_t>(stages), 0);
  std::map<std::tuple<int, int, int64_t>, int64_t> done;  // (virtual stage, kind, micro) -> end
  // (from, to) -> the messages (kind, virtual stage of the receiver, micro-batch) in sending
  // order, and in receiving order.
  std::map<std::pair<int, int>, std::vector<std::tuple<int, int, int64_t>>> sent, received;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      const auto i = static_cast<size_t>(s);
      if (next[i] == passes[i].size()) continue;
      const PipelinePass p = passes[i][next[i]];
      const bool fwd = p.kind == Kind::forward;
      const int v = p.chunk * stages + s;
      const int from = fwd ? v - 1 : v + 1;  // the virtual stage this pass waits for
      int64_t ready = clock[i];
      const int kind = static_cast<int>(p.kind);
      if (from >= 0 && from < virtual_stages) {
        const auto it = done.find({from, kind, p.micro_batch});
        if (it == done.end()) continue;
        ready = std::max(ready, it->second);
        received[{from % stages, s}].push_back({kind, v, p.micro_batch});
      }
      const int to = fwd ? v + 1 : v - 1;
      if (to >= 0 && to < virtual_stages)
        sent[{s, to % stages}].push_back({kind, to, p.micro_batch});
      clock[i] = ready + (fwd ? forward_time : backward_time);
      done[{v, kind, p.micro_batch}] = clock[i];
      ++next[i];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[static_cast<size_t>(s)] != passes[static_cast<size_t>(s)].size()) return -1;
  }
  EXPECT_EQ(sent, received) << stages << " stages, " << chunks << " chunks, " << micro_batches
                            << " micro-batches: a message would be taken for another";
  return *std::max_element(clock.begin(), clock.end());
}

TEST(PipelineSchedule, CompletesWithTheTheoreticalBubble) {
  for (int stages : {1, 2, 3, 4, 8}) {
    for (int64_t micro : {1, 2, 4, 7, 16}) {
      const int64_t makespan = simulate(stages, 1, micro, 1, 2);
      ASSERT_GT(makespan, 0) << stages << " stages, " << micro << " micro-batches deadlock";
      const double busy = static_cast<double>(micro * 3);
      const double bubble = 1.0 - busy / static_cast<double>(makespan);
      EXPECT_NEAR(bubble, one_forward_one_backward_bubble(stages, micro), 1e-12)
          << stages << " stages, " << micro << " micro-batches";
    }
  }
}

// Chunk 1 of rank 1 is the last virtual stage: its backward follows its forward at once.
TEST(PipelineSchedule, InterleavedOrderByHand) {
  EXPECT_EQ(describe(interleaved_one_forward_one_backward(2, 0, 2, 4)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(describe(interleaved_one_forward_one_backward(2, 1, 2, 4)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // As many micro-batches as stages: every forward first.
  EXPECT_EQ(describe(interleaved_one_forward_one_backward(2, 1, 2, 2)),
            "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
  EXPECT_EQ(interleaved_one_forward_one_backward(3, 1, 1, 5), one_forward_one_backward(3, 1, 5));
}

TEST(PipelineSchedule, InterleavedRefusesWhatItCannotRun) {
  EXPECT_TPF_ERROR(interleaved_one_forward_one_backward(2, 0, 2, 3), ErrorCode::invalid_argument,
                   "3 micro-batches are not a multiple of the 2 stages");
  EXPECT_TPF_ERROR(interleaved_one_forward_one_backward(2, 0, 0, 4), ErrorCode::invalid_argument,
                   "0 chunks");
  EXPECT_TPF_ERROR(interleaved_one_forward_one_backward(2, 2, 2, 4), ErrorCode::invalid_argument,
                   "stage 2 of 2");
}

// Every (chunk, micro-batch) runs forward once and backward once, after its forward; the ranks
// never deadlock; the bubble is exactly (P - 1) / (V M + P - 1).
TEST(PipelineSchedule, InterleavedCompletesAndShrinksTheBubble) {
  using Kind = PipelinePass::Kind;
  for (int stages : {2, 3, 4}) {
    for (int chunks : {2, 3, 4}) {
      for (int64_t groups : {1, 2, 3, 5}) {
        const int64_t micro = groups * stages;
        for (int s = 0; s < stages; ++s) {
          std::map<std::pair<int, int64_t>, int> state;  // 1 after forward, 2 after backward
          for (const PipelinePass& p :
               interleaved_one_forward_one_backward(stages, s, chunks, micro)) {
            int& st = state[{p.chunk, p.micro_batch}];
            EXPECT_EQ(st, p.kind == Kind::forward ? 0 : 1) << describe({p});
            ++st;
          }
          EXPECT_EQ(state.size(), static_cast<size_t>(chunks * micro));
        }
        const int64_t makespan = simulate(stages, chunks, micro, 1, 2);
        ASSERT_GT(makespan, 0) << stages << " stages, " << chunks << " chunks, " << micro
                               << " micro-batches deadlock";
        const double busy = static_cast<double>(3 * chunks * micro);
        const double bubble = 1.0 - busy / static_cast<double>(makespan);
        EXPECT_NEAR(bubble, interleaved_bubble(stages, chunks, micro), 1e-12)
            << stages << " stages, " << chunks << " chunks, " << micro << " micro-batches";
      }
    }
  }
}

}  // namespace
}  // namespace tpf::testing
