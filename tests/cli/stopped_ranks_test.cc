// `tpf run`'s watch for a stopped rank that no running rank could find lost
// (apps/cli/stopped_ranks.h), on a clock of the test's: it finds one only while every running rank
// is stopped, counting from the first look that saw it stopped, and says it in the ranks' words.
// The launcher's use of it runs in FlightRecorderLauncher.AStoppedRankNoOtherRankWaitsOnIsEnded.
#include "cli/stopped_ranks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

namespace tpf::cli {
namespace {

using namespace std::chrono_literals;
using Look = StoppedRanks::Look;

const StoppedRanks::Clock::time_point t0{std::chrono::hours(1)};

// A look at `rank` (process `pid`) on this machine, or on `host`.
Look rank_look(int rank, bool stopped, pid_t pid, const std::string& host = "") {
  return {rank, stopped, pid, host};
}

TEST(StoppedRanks, ARankStoppedWhileNoOtherRunsIsFoundOnceStoppedForLostAfter) {
  StoppedRanks watch(3, 1000ms);
  EXPECT_FALSE(watch.look_due(t0));  // none before the watch begins
  EXPECT_FALSE(watch.next_look().has_value());
  watch.begin(t0 - 100ms);
  watch.begin(t0);  // changes nothing
  EXPECT_FALSE(watch.look_due(t0 - 1ms));
  EXPECT_TRUE(watch.look_due(t0));  // the first look is due a tenth of lost_after after begin
  // First seen stopped: the time counts from here.
  EXPECT_TRUE(watch.look({rank_look(2, true, 4242)}, t0).empty());
  EXPECT_FALSE(watch.look_due(t0 + 50ms));
  EXPECT_EQ(watch.next_look(), t0 + 100ms);  // a tenth of lost_after
  EXPECT_TRUE(watch.look({rank_look(2, true, 4242)}, t0 + 900ms).empty());
  const std::vector<StoppedRanks::Found> found =
      watch.look({rank_look(2, true, 4242)}, t0 + 1000ms);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].text,
            "rank 2 (pid 4242) has been stopped for 1.0 s (a stop signal, or a debugger holding "
            "it): found lost (TPF_HOST_LOST_S = 1.0 s)");
}

// tpf run --hosts looks at its ranks on their hosts: the text says where the process is.
TEST(StoppedRanks, ARankOnAnotherHostIsNamedWithItsHost) {
  StoppedRanks watch(2, 1000ms);
  EXPECT_TRUE(watch.look({rank_look(1, true, 4242, "c")}, t0).empty());
  const std::vector<StoppedRanks::Found> found =
      watch.look({rank_look(1, true, 4242, "c")}, t0 + 1500ms);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].text,
            "rank 1 (pid 4242 on host 'c') has been stopped for 1.5 s (a stop signal, or a "
            "debugger holding it): found lost (TPF_HOST_LOST_S = 1.0 s)");
}

TEST(StoppedRanks, NoneIsFoundWhileARunningRankCouldWaitOnIt) {
  StoppedRanks watch(3, 1000ms);
  EXPECT_TRUE(watch.look({rank_look(1, false, 11), rank_look(2, true, 12)}, t0).empty());
  // Stopped for 2 s, but rank 1 runs: it is rank 1's to find, if it waits on it.
  EXPECT_TRUE(watch.look({rank_look(1, false, 11), rank_look(2, true, 12)}, t0 + 2s).empty());
  // Rank 1 has ended: rank 2's time counted all along.
  const std::vector<StoppedRanks::Found> found = watch.look({rank_look(2, true, 12)}, t0 + 2100ms);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
}

TEST(StoppedRanks, EveryRankStoppedLongEnoughIsFoundAndARunningLookStartsTheCountAgain) {
  StoppedRanks watch(3, 1000ms);
  EXPECT_TRUE(watch.look({rank_look(1, true, 11), rank_look(2, true, 12)}, t0).empty());
  EXPECT_TRUE(
      watch.look({rank_look(1, false, 11), rank_look(2, true, 12)}, t0 + 500ms).empty());  // 1 ran
  EXPECT_TRUE(watch.look({rank_look(1, true, 11), rank_look(2, true, 12)}, t0 + 600ms).empty());
  std::vector<StoppedRanks::Found> found =
      watch.look({rank_look(1, true, 11), rank_look(2, true, 12)}, t0 + 1s);
  ASSERT_EQ(found.size(), 1u);  // rank 1's count started again at 600 ms
  EXPECT_EQ(found[0].rank, 2);
  found = watch.look({rank_look(1, true, 11)}, t0 + 1600ms);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 1);
}

TEST(StoppedRanks, ZeroFindsNoneAndNeedsNoLook) {
  StoppedRanks watch(2, 0ms);
  watch.begin(t0);
  EXPECT_FALSE(watch.look_due(t0 + std::chrono::hours(1)));
  EXPECT_FALSE(watch.next_look().has_value());
  EXPECT_TRUE(watch.look({rank_look(1, true, 11)}, t0).empty());
  EXPECT_TRUE(watch.look({rank_look(1, true, 11)}, t0 + std::chrono::hours(24)).empty());
}

}  // namespace
}  // namespace tpf::cli
