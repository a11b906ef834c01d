// The 1F1B schedule: each stage's order by hand, and, simulated with unit-time forwards and
// two-unit backwards over P stages that wait for their neighbours, that it completes and idles
// exactly (P - 1) / (M + P - 1) of the time, as Narayanan et al. (2021) derive.
#include "model/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

// Runs every stage's passes in order; a forward waits for the previous stage's forward of the same
// micro-batch, a backward for the next stage's backward. Returns the time the last pass ends, or -1
// if the stages deadlock.
int64_t simulate(int stages, int64_t micro_batches, int64_t forward_time, int64_t backward_time) {
  using Kind = PipelinePass::Kind;
  std::vector<std::vector<PipelinePass>> passes;
  for (int s = 0; s < stages; ++s)
    passes.push_back(one_forward_one_backward(stages, s, micro_batches));
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<int64_t> clock(static_cast<size_t>(stages), 0);
  std::map<std::tuple<int, int, int64_t>, int64_t> done;  // (stage, kind, micro) -> end time
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      const auto i = static_cast<size_t>(s);
      if (next[i] == passes[i].size()) continue;
      const PipelinePass p = passes[i][next[i]];
      const bool fwd = p.kind == Kind::forward;
      const int neighbour = fwd ? s - 1 : s + 1;
      int64_t ready = clock[i];
      if (neighbour >= 0 && neighbour < stages) {
        const auto it = done.find({neighbour, static_cast<int>(p.kind), p.micro_batch});
        if (it == done.end()) continue;
        ready = std::max(ready, it->second);
      }
      clock[i] = ready + (fwd ? forward_time : backward_time);
      done[{s, static_cast<int>(p.kind), p.micro_batch}] = clock[i];
      ++next[i];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[static_cast<size_t>(s)] != passes[static_cast<size_t>(s)].size()) return -1;
  }
  return *std::max_element(clock.begin(), clock.end());
}

TEST(PipelineSchedule, CompletesWithTheTheoreticalBubble) {
  for (int stages : {1, 2, 3, 4, 8}) {
    for (int64_t micro : {1, 2, 4, 7, 16}) {
      const int64_t makespan = simulate(stages, micro, 1, 2);
      ASSERT_GT(makespan, 0) << stages << " stages, " << micro << " micro-batches deadlock";
      const double busy = static_cast<double>(micro * 3);
      const double bubble = 1.0 - busy / static_cast<double>(makespan);
      EXPECT_NEAR(bubble, one_forward_one_backward_bubble(stages, micro), 1e-12)
          << stages << " stages, " << micro << " micro-batches";
    }
  }
}

}  // namespace
}  // namespace tpf::testing
