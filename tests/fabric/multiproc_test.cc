// The multi-process harness itself: outcomes, messages, signals and the deadline are reported as
// they happened (tested with run_ranks_raw, which needs no communicator).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <stdexcept>

#include "support/multiproc.h"

namespace tpf::testing {
namespace {

TEST(MultiprocHarness, ReportsExitCodesMessagesAndSignalsPerRank) {
  auto outcomes = run_ranks_raw(4, [](const RankContext& ctx) {
    if (ctx.rank == 1) throw std::runtime_error("rank one failed on purpose");
    if (ctx.rank == 2) TPF_CHILD_CHECK(ctx.size == 5, "size is " + std::to_string(ctx.size));
    if (ctx.rank == 3) ::raise(SIGKILL);
  });
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
  EXPECT_FALSE(outcomes[1].ok());
  EXPECT_NE(outcomes[1].message.find("rank one failed on purpose"), std::string::npos);
  EXPECT_NE(outcomes[2].message.find("size is 4"), std::string::npos) << outcomes[2].message;
  EXPECT_EQ(outcomes[3].signal, SIGKILL);
  EXPECT_FALSE(outcomes[3].timed_out);
}

TEST(MultiprocHarness, DeadlineKillsRanksStillRunning) {
  RunOptions options;
  options.deadline = std::chrono::milliseconds(300);
  SharedBlock never;
  const auto start = Clock::now();
  auto outcomes = run_ranks_raw(2, [&](const RankContext& ctx) {
    if (ctx.rank == 0) return;
    wait_until([&] { return never.counter(0).load() == 1; }, std::chrono::milliseconds(30000));
  }, options);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(outcomes[0].ok());
  EXPECT_TRUE(outcomes[1].timed_out);
  EXPECT_NE(outcomes[1].describe().find("still running"), std::string::npos);
}

TEST(MultiprocHarness, ContextCarriesStoreAddressAndUniqueJobName) {
  SharedBlock shared;
  auto outcomes = run_ranks_raw(2, [&](const RankContext& ctx) {
    TPF_CHILD_CHECK(ctx.store_address.rfind("127.0.0.1:", 0) == 0, ctx.store_address);
    TPF_CHILD_CHECK(!ctx.job_name.empty(), "empty job name");
    const char* env = ::getenv("TPF_JOB_ID");
    TPF_CHILD_CHECK(env != nullptr && ctx.job_name == env, "TPF_JOB_ID not exported");
    shared.counter(static_cast<size_t>(ctx.rank)).store(static_cast<int64_t>(std::hash<std::string>{}(ctx.job_name)));
  });
  expect_all_ok(outcomes);
  EXPECT_EQ(shared.counter(0).load(), shared.counter(1).load());
}

}  // namespace
}  // namespace tpf::testing
