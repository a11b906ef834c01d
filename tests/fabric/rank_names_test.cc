// How messages name a communicator's ranks (transport/rank_names.h).
#include "transport/rank_names.h"

#include <gtest/gtest.h>

namespace tpf::transport {
namespace {

TEST(RankNames, RanksNumberedAsInTheJobAreNamedOnce) {
  for (const RankNames& names : {RankNames(), RankNames({0, 1, 2})}) {
    EXPECT_EQ(names(1), "rank 1");
    EXPECT_EQ(names.with_host(2, "b"), "rank 2 (host 'b')");
    EXPECT_EQ(names.list({1}), "rank 1");
    EXPECT_EQ(names.list({0, 2}), "ranks 0, 2");
    EXPECT_EQ(names.job_rank(2), 2);
  }
}

TEST(RankNames, ASplitsRanksAreNamedWithTheirJobRanks) {
  const RankNames names({6, 2, 4});  // a split's ranks 0, 1, 2 are the job's 6, 2, 4
  EXPECT_EQ(names.job_rank(0), 6);
  EXPECT_EQ(names(0), "rank 0 (job rank 6)");
  EXPECT_EQ(names.with_host(1, "host-a"), "rank 1 (job rank 2, host 'host-a')");
  EXPECT_EQ(names.list({2}), "rank 2 (job rank 4)");
  EXPECT_EQ(names.list({0, 2}), "ranks 0, 2 (job ranks 6, 4)");
}

TEST(RankNames, ARankOutsideTheMapKeepsItsNumber) {
  const RankNames names({0, 1});
  EXPECT_EQ(names(-1), "rank -1");
  EXPECT_EQ(names(5), "rank 5");
  EXPECT_EQ(join_ranks({}), "");
  EXPECT_EQ(join_ranks({3, 1}), "3, 1");
}

}  // namespace
}  // namespace tpf::transport
