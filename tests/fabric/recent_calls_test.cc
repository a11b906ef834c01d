// RecentCalls (comm/recent_calls.h): the calls a rank made lately, by sequence number, and the one
// it is in, which the heartbeat sends and compares (comm/heartbeat.h; the mismatch it finds:
// AcrossHostsFailures.LeadersWaitingForASmallBroadcastNobodySendsFailWithAMismatch).
#include "comm/recent_calls.h"

#include <gtest/gtest.h>

namespace tpf::detail {
namespace {

transport::Fingerprint call(uint64_t sequence, uint64_t count = 1) {
  transport::Fingerprint fp;
  fp.words[0] = sequence;
  fp.words[1] = count;
  fp.words[2] = 7;
  return fp;
}

TEST(RecentCalls, TheCurrentCallLastsFromBeginToEnd) {
  RecentCalls calls;
  EXPECT_FALSE(calls.current());
  calls.begin(call(0, 5));
  EXPECT_EQ(calls.current(), call(0, 5));
  calls.end();
  EXPECT_FALSE(calls.current());
  EXPECT_EQ(calls.at(0), call(0, 5));  // still known after it ended
}

TEST(RecentCalls, KeepsTheLastCallsBySequenceAndForgetsOlderOnes) {
  RecentCalls calls;
  EXPECT_FALSE(calls.at(0));  // nothing called yet
  const uint64_t last = RecentCalls::kKept + 9;
  for (uint64_t s = 0; s <= last; ++s) {
    calls.begin(call(s, s * 3));
    calls.end();
  }
  for (uint64_t s = last + 1 - RecentCalls::kKept; s <= last; ++s)
    EXPECT_EQ(calls.at(s), call(s, s * 3)) << s;
  EXPECT_FALSE(calls.at(9));         // overwritten by kKept + 9
  EXPECT_FALSE(calls.at(last + 1));  // not called yet (its slot holds an older call)
  EXPECT_FALSE(calls.at(last + RecentCalls::kKept));
}

}  // namespace
}  // namespace tpf::detail
