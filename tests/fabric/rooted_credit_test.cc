// RootedCredit (coll/rooted_credit.h): the byte credit between host leaders of the rooted calls
// whose senders do not wait. Across hosts, a root held by it: AcrossHostsCredit in
// across_hosts_test.cc.
#include "coll/rooted_credit.h"

#include <gtest/gtest.h>

#include <random>

#include "coll/network_cost.h"
#include "transport/shm_fabric.h"

namespace tpf::coll {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * kKiB;
// The largest message of a rooted call: a fingerprint and kNetworkRootedPackedBytes.
constexpr size_t kLargest = sizeof(transport::Fingerprint) + kNetworkRootedPackedBytes;

TEST(RootedCredit, TheWindowSharesEightMiBAmongAReceiversSendersWithinItsBounds) {
  EXPECT_EQ(RootedCredit::window_bytes(2), 4 * kMiB);
  EXPECT_EQ(RootedCredit::window_bytes(3), 4 * kMiB);
  EXPECT_EQ(RootedCredit::window_bytes(5), 2 * kMiB);
  EXPECT_EQ(RootedCredit::window_bytes(9), 1 * kMiB);
  EXPECT_EQ(RootedCredit::window_bytes(17), 512 * kKiB);
  EXPECT_EQ(RootedCredit::window_bytes(100000), 512 * kKiB);
  const RootedCredit credit(2);
  EXPECT_EQ(credit.window(), 4 * kMiB);
  EXPECT_EQ(credit.quantum(), 1 * kMiB);
}

// On two hosts, a sender whose receiver acknowledges nothing sends 68 of the largest messages
// (68 x 61,464 bytes fit in 4 MiB, 69 do not) and then must have the acknowledgement of the first
// quantum, which the 18th message crossed (18 x 61,464 > 1 MiB); with it, it goes on.
TEST(RootedCredit, ASenderGoesOnUntilTheWindowIsFullThenWaitsForTheOldestAcknowledgement) {
  RootedCredit credit(2);
  const int peer = 5;
  uint64_t sequence = 0;
  while (!credit.awaited_before(peer, kLargest)) credit.sent(peer, ++sequence, kLargest);
  EXPECT_EQ(sequence, 68u);
  const RootedCredit::Awaited oldest{18, 18 * kLargest};
  EXPECT_EQ(credit.awaited_before(peer, kLargest), oldest);
  // A smaller message may still fit where the largest does not.
  EXPECT_FALSE(credit.awaited_before(peer, credit.window() - 68 * kLargest));
  credit.acknowledged(peer);
  EXPECT_FALSE(credit.awaited_before(peer, kLargest));
  // Another peer's credit is its own.
  EXPECT_FALSE(credit.awaited_before(peer + 1, kLargest));
}

// A sender and its receiver count the same messages and so agree, without telling each other,
// on where the acknowledgements fall: each one the receiver sends is the one the sender awaits
// next, with the same call and count; and the sender, acknowledged only when it must be, never
// has more than the window unacknowledged. Random sizes up to the largest, on 2 and 17 hosts.
TEST(RootedCredit, SenderAndReceiverAgreeWhereTheAcknowledgementsFall) {
  for (const int hosts : {2, 17}) {
    SCOPED_TRACE(std::to_string(hosts) + " hosts");
    RootedCredit sender(hosts), receiver(hosts);
    const int sender_rank = 0, receiver_rank = 1;
    std::mt19937_64 random(42);
    std::uniform_int_distribution<size_t> size(1, kLargest);
    std::vector<RootedCredit::Awaited> sent_acknowledgements;  // what the receiver sent, in order
    size_t next_delivered = 0, waits = 0;
    uint64_t sent = 0, acknowledged = 0;  // bytes, as the test counts them
    for (uint64_t sequence = 0; sequence < 20000; ++sequence) {
      const size_t bytes = size(random);
      while (const auto awaited = sender.awaited_before(receiver_rank, bytes)) {
        ASSERT_LT(next_delivered, sent_acknowledgements.size()) << "awaited one never sent";
        EXPECT_EQ(*awaited, sent_acknowledgements[next_delivered]);
        acknowledged = awaited->through;
        ++next_delivered;
        ++waits;
        sender.acknowledged(receiver_rank);
      }
      sender.sent(receiver_rank, sequence, bytes);
      sent += bytes;
      ASSERT_LE(sent - acknowledged, sender.window()) << "at call " << sequence;
      if (const auto through = receiver.received(sender_rank, bytes))
        sent_acknowledgements.push_back({sequence, *through});
    }
    EXPECT_GT(waits, 0u);
    // What the sender still awaits is what the receiver sent and the sender has not taken.
    const auto awaited = sender.all_awaited();
    ASSERT_EQ(awaited.size(), sent_acknowledgements.size() - next_delivered);
    for (size_t i = 0; i < awaited.size(); ++i) {
      EXPECT_EQ(awaited[i].first, receiver_rank);
      EXPECT_EQ(awaited[i].second, sent_acknowledgements[next_delivered + i]);
    }
  }
}

// Small messages need no acknowledgement for a long time: a quantum of 1 MiB is 37,449 calls of
// 4 B (a fingerprint and one int32).
TEST(RootedCredit, SmallMessagesCrossAQuantumRarely) {
  RootedCredit receiver(2);
  const size_t message = sizeof(transport::Fingerprint) + 4;
  size_t acknowledgements = 0;
  for (int i = 0; i < 37449; ++i) acknowledgements += receiver.received(3, message) ? 1 : 0;
  EXPECT_EQ(acknowledgements, 0u);
  EXPECT_TRUE(receiver.received(3, message));  // the 37,450th crosses 1 MiB
}

}  // namespace
}  // namespace tpf::coll
