// The network link class (coll/network_cost.h) and its calibration (plan/network_calibration.h):
// the formulas against hand counts, the algorithm choice, exact recovery of known constants from
// runs on 2 hosts and prediction at other host counts, bench JSON errors, and the fit on the runs
// saved from this machine (docs/results/calibration-network).
#include "plan/network_calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "coll/network_cost.h"
#include "support/expect_tpf_error.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::Collective;
using coll::NetworkAlgorithm;
using coll::NetworkLinkCost;

NetworkLinkCost known_cost() {
  NetworkLinkCost c;
  c.call_us = 5;
  c.step_us = 10;
  c.link_gbps = 1;
  c.reduce_gbps = 10;
  return c;
}

// Hand counts: 5 us per call, one round (10 us) per step, 1 kB per us on the link, 10 kB per us
// combined.
TEST(NetworkCost, PredictsTheStepsAndBytesOfEachAlgorithm) {
  const NetworkLinkCost c = known_cost();
  // one_shot all_reduce on 4 hosts: 1 step, 3 buffers out of each link, 4 combined.
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::one_shot, 1'000'000, 4, c),
      5 + 10 + 3000 + 400);
  // pipelined all_reduce: fingerprints, then one segment (2 steps), 2 (H-1)/H of the buffer.
  EXPECT_DOUBLE_EQ(coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::pipelined,
                                            1'000'000, 4, c),
                   5 + 30 + 1500 + 100);
  // one_shot broadcast on 3 hosts: the root's link carries 2 copies.
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::one_shot, 1'000'000, 3, c),
      5 + 10 + 2000);
  // pipelined broadcast: fingerprints, then a chain of 2 links, cut by the model
  // (chain_chunk_elems: sqrt(1 x 1e6 B / (1 kB/us x (10 + 7) us)) = 7.7, so 8 chunks of 130 kB):
  // 1 + 2 + 7 steps; the buffer through the last link and a chunk through the one before it
  // (1e6 + 1e6 / 8 bytes). Cut as before the cut followed the model (a recorded run without the
  // keys): 2 chunks of 512 KiB, 1 + 2 + 1 steps, 1e6 + 5e5 bytes.
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::pipelined, 1'000'000, 3, c),
      5 + 100 + 1125);
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::pipelined, 1'000'000, 3, c,
                               coll::all_reduce_min_slice_bytes(c), coll::ChainCut{}),
      5 + 40 + 1500);
  // The chain on 2 hosts (one link, nothing to fill; 2 chunks of 512 KiB): 1 + 1 + 1 steps, the
  // buffer once.
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::pipelined, 1'000'000, 2, c),
      5 + 30 + 1000);
  // tree broadcast: the whole buffer over each of ceil(log2 H) hops (2 on 4 hosts, 3 on 5 to 8).
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::tree, 1'000'000, 4, c),
      5 + 20 + 2000);
  EXPECT_DOUBLE_EQ(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::tree, 1'000'000, 5, c),
      5 + 30 + 3000);
  // halving_doubling all_reduce: fingerprints, then log2 P rounds each way with (P - 1) / P of
  // the buffer through each link and as much combined; on 5 hosts (P = 4) hosts 0 and 1 pair up
  // first, 2 steps and the buffer once more each way, and combined once more.
  EXPECT_DOUBLE_EQ(coll::predict_network_us(Collective::all_reduce,
                                            NetworkAlgorithm::halving_doubling, 1'000'000, 4, c),
                   5 + 50 + 1500 + 75);
  EXPECT_DOUBLE_EQ(coll::predict_network_us(Collective::all_reduce,
                                            NetworkAlgorithm::halving_doubling, 1'000'000, 5, c),
                   5 + 70 + 2500 + 175);
  // Segments keep each host's slice at least the smallest slice: four rounds' worth of the link,
  // 512 KiB at most (the default 100 Gb/s link: 4 x 11 us x 12.5 GB/s = 550 kB), 128 KiB at least.
  EXPECT_EQ(coll::all_reduce_min_slice_bytes(NetworkLinkCost{}), size_t{512} << 10);
  NetworkLinkCost link;
  link.link_gbps = 0.0625;  // 500 Mb/s
  EXPECT_EQ(coll::all_reduce_min_slice_bytes(link), size_t{128} << 10);
  link.link_gbps = 3.125;  // 25 Gb/s: 4 x 11 us x 3.125 GB/s
  EXPECT_EQ(coll::all_reduce_min_slice_bytes(link), 137'500u);
  EXPECT_EQ(coll::all_reduce_segments(size_t{4} << 20, 2, size_t{512} << 10), 4u);
  EXPECT_EQ(coll::all_reduce_segments(size_t{4} << 20, 2, size_t{128} << 10), 16u);
  EXPECT_EQ(coll::all_reduce_segments(1000, 8, size_t{128} << 10), 1u);
  EXPECT_TPF_ERROR(
      coll::predict_network_us(Collective::all_gather, NetworkAlgorithm::one_shot, 8, 2, c),
      ErrorCode::invalid_argument, "all_gather");
  EXPECT_TPF_ERROR(
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::one_shot, 8, 1, c),
      ErrorCode::invalid_argument, "1 hosts");
  EXPECT_TPF_ERROR(
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::tree, 8, 4, c),
      ErrorCode::invalid_argument, "all_reduce tree");
  EXPECT_TPF_ERROR(
      coll::predict_network_us(Collective::broadcast, NetworkAlgorithm::halving_doubling, 8, 4, c),
      ErrorCode::invalid_argument, "broadcast halving_doubling");
}

// Halving-doubling's shape: P the largest power of two <= H; the first 2 (H - P) hosts in pairs,
// the odd one of each pair handing its data to the even one, the others at positions in host
// order. Its messages (hand counts, chunks of 512 KiB): 3 MiB on 4 hosts, rounds of 1.5 MiB (3
// chunks) and 768 KiB (2 chunks), each sent and received in both phases: 4 x 5; 1 MiB on 5
// hosts, rounds of one chunk (4 x 2) and the pair's buffer in and out (2 x 2 chunks).
TEST(NetworkCost, HalvingDoublingPairsTheFirstHostsAndCountsItsMessages) {
  const coll::HalvingDoubling five(5), six(6), eight(8);
  EXPECT_EQ(five.powered, 4);
  EXPECT_EQ(five.pairs(), 1);
  EXPECT_EQ(five.rounds(), 2);
  EXPECT_EQ(eight.pairs(), 0);
  EXPECT_EQ(eight.rounds(), 3);
  const int five_positions[] = {0, -1, 1, 2, 3}, six_positions[] = {0, -1, 1, -1, 2, 3};
  for (int h = 0; h < 5; ++h) EXPECT_EQ(five.position_of(h), five_positions[h]) << h;
  for (int h = 0; h < 6; ++h) EXPECT_EQ(six.position_of(h), six_positions[h]) << h;
  for (int v = 0; v < 4; ++v) {
    EXPECT_EQ(six.position_of(six.host_at(v)), v) << v;
    EXPECT_EQ(five.position_of(five.host_at(v)), v) << v;
  }
  EXPECT_EQ(coll::halving_doubling_messages(size_t{3} << 20, 4), 20u);
  EXPECT_EQ(coll::halving_doubling_messages(size_t{1} << 20, 5), 12u);
  EXPECT_EQ(coll::halving_doubling_messages(8192, 8), 12u);
}

// The model puts halving-doubling in the pipelined form's place for latency-bound all_reduce,
// and only there:
// - 8 hosts at 1 Gb/s, 8 KiB (the defaults otherwise): 7 steps (77), 7/4 of 8 KiB through the
//   link (114.688), 7/8 of it combined (0.7168), the fingerprint rounds (+64) and 12 messages
//   (84): 344.4048 against pipelined's 412.5072 (3 steps, the link's 114.688, 8 KiB combined,
//   +64, 28 messages): taken. 4 KiB goes in one round, priced above halving-doubling: never in
//   one round's place.
// - 3 hosts: the pair's extra rounds and buffer, never. 4 hosts at 1 Gb/s, 16 KiB: taken.
// - 8 hosts at 100 Gb/s, 256 KiB: priced 0.8 of pipelined, but its first rounds carry 128 KiB
//   (halving_doubling_messages_are_small): pipelined. 128 KiB, rounds of 64 KiB: taken.
// - Forced, all_reduce takes it at any size; a broadcast keeps the model's choice.
TEST(NetworkCost, HalvingDoublingTakesLatencyBoundAllReducesOnManyHosts) {
  NetworkLinkCost gbit;
  gbit.link_gbps = 0.125;
  EXPECT_NEAR(coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::halving_doubling,
                                      8192, 8, gbit),
              344.4048, 1e-9);
  EXPECT_NEAR(
      coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::pipelined, 8192, 8, gbit),
      412.5072, 1e-9);
  auto choice = [](size_t bytes, int hosts, const NetworkLinkCost& cost) {
    return coll::choose_network_algorithm(Collective::all_reduce, bytes, hosts, std::nullopt, cost);
  };
  EXPECT_EQ(choice(8192, 8, gbit), NetworkAlgorithm::halving_doubling);
  EXPECT_EQ(choice(4096, 8, gbit), NetworkAlgorithm::one_shot);
  EXPECT_LT(coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::halving_doubling,
                                    4096, 8, gbit),
            coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::one_shot, 4096, 8,
                                    gbit));
  EXPECT_EQ(choice(16384, 4, gbit), NetworkAlgorithm::halving_doubling);
  const NetworkLinkCost fast;  // 100 Gb/s
  for (const NetworkLinkCost& cost : {gbit, fast}) {
    for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 2) {
      EXPECT_NE(choice(bytes, 3, cost), NetworkAlgorithm::halving_doubling) << bytes;
    }
  }
  EXPECT_TRUE(coll::halving_doubling_messages_are_small(size_t{128} << 10, 8));
  EXPECT_FALSE(coll::halving_doubling_messages_are_small(size_t{128} << 10, 9));  // the pair's
  EXPECT_TRUE(coll::halving_doubling_messages_are_small(size_t{64} << 10, 9));
  EXPECT_FALSE(coll::halving_doubling_messages_are_small(size_t{256} << 10, 8));
  EXPECT_LT(coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::halving_doubling,
                                    size_t{256} << 10, 8, fast),
            0.9 * coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::pipelined,
                                          size_t{256} << 10, 8, fast));
  EXPECT_EQ(choice(size_t{256} << 10, 8, fast), NetworkAlgorithm::pipelined);
  EXPECT_EQ(choice(size_t{128} << 10, 8, fast), NetworkAlgorithm::halving_doubling);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, size_t{64} << 20, 4,
                                           NetworkAlgorithm::halving_doubling, fast),
            NetworkAlgorithm::halving_doubling);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, size_t{64} << 20, 4,
                                           NetworkAlgorithm::halving_doubling, fast),
            coll::choose_network_algorithm(Collective::broadcast, size_t{64} << 20, 4, std::nullopt,
                                           fast));
}

// all_gather's ring numbers every host's chunks together: the usual cut where they fit, larger
// chunks where they would not (hand counts with a budget of 16 chunks; f32, 512 KiB chunks are
// 131072 elements).
TEST(NetworkCost, TheRingsChunksOfEveryHostFitTheTagTogether) {
  constexpr size_t kChunk = size_t{131072};
  // 3 hosts of 4 chunks each: 12 <= 16, the usual cut.
  EXPECT_EQ(coll::ring_chunk_elems({4 * kChunk, 4 * kChunk, 4 * kChunk}, 4, 16),
            (std::vector<size_t>{kChunk, kChunk, kChunk}));
  // 3 hosts of 8, 8 and 1 chunks: 17 > 16, so chunks of at least ceil(17 x 131072 / (16 - 3)) =
  // 171402 elements; counts of 8, 8 and 1 chunks then make 7 + 7 + 1 = 15 chunks.
  const std::vector<size_t> counts = {8 * kChunk, 8 * kChunk, kChunk};
  const std::vector<size_t> per = coll::ring_chunk_elems(counts, 4, 16);
  EXPECT_EQ(per, (std::vector<size_t>{171402, 171402, 171402}));
  size_t chunks = 0;
  for (size_t h = 0; h < counts.size(); ++h) chunks += coll::chunks_of_size(counts[h], per[h]);
  EXPECT_EQ(chunks, 15u);
  // More hosts than half the budget: the usual cut (the leaders then send directly).
  EXPECT_EQ(coll::ring_chunk_elems(std::vector<size_t>(9, 4 * kChunk), 4, 16),
            std::vector<size_t>(9, kChunk));
  EXPECT_EQ(coll::chunks_of_size(0, kChunk), 1u);  // an empty transfer is one empty message
}

// all_gather goes round a ring where its H - 2 extra rounds cost at most 5 % of the transfer:
// hand counts at step_us 11, 4 hosts: 22 us <= 0.05 x 3 x bytes / link, so from 1,833,334 bytes
// per host at 12.5 GB/s (12,500 bytes/us) and from 9,167 at 0.0625 GB/s; always on 2 hosts.
TEST(NetworkCost, AllGatherGoesRoundARingWhereItsRoundsAreCheapBesideTheTransfer) {
  coll::NetworkLinkCost fast;  // the defaults: 12.5 GB/s, step_us 11
  EXPECT_TRUE(coll::all_gather_in_ring(1833334, 4, fast));
  EXPECT_FALSE(coll::all_gather_in_ring(1833332, 4, fast));
  EXPECT_TRUE(coll::all_gather_in_ring(1, 2, fast));
  coll::NetworkLinkCost slow;
  slow.link_gbps = 0.0625;
  EXPECT_TRUE(coll::all_gather_in_ring(9167, 4, slow));
  EXPECT_FALSE(coll::all_gather_in_ring(9166, 4, slow));
  // 64 hosts of 64 KiB at 100 Gb/s: 62 rounds (682 us) against a 330 us transfer: direct.
  EXPECT_FALSE(coll::all_gather_in_ring(65536, 64, fast));
}

// The broadcast chain's chunks: about sqrt((H - 2) b / (link x (step + message))) of them, between
// 32 KiB and 512 KiB each and at most 4096. Hand counts, step + message = 18 us:
// - 8 hosts at 1 Gb/s (125 B/us), 512 KiB: sqrt(6 x 524288 / 2250) = 37.4 chunks of 14 kB, held
//   at 32 KiB: 16 chunks (before: one chunk, carried whole over every hop).
// - 64 hosts at 100 Gb/s, 4 MiB of f32: sqrt(62 x 4194304 / 225000) = 34.0 chunks of 123,374 B =
//   30,843 elements: 34 chunks (before: 8 of 512 KiB).
// - 64 hosts at 1 Gb/s, 1 GiB: 5,440 chunks would be too many tags: 4096 of 256 KiB.
// - 2 hosts (one hop) and runs recorded without the cut: the fixed 512 KiB cut.
TEST(NetworkCost, TheBroadcastChainIsCutForItsHops) {
  NetworkLinkCost slow;
  slow.link_gbps = 0.125;
  const coll::ChainCut slow_cut = coll::chain_cut(slow);
  EXPECT_DOUBLE_EQ(slow_cut.round_us, 18);
  EXPECT_EQ(coll::chain_chunk_elems(size_t{512} << 10, 1, 8, slow_cut), coll::kChainMinChunkBytes);
  const NetworkLinkCost fast;
  EXPECT_EQ(coll::chain_chunk_elems(size_t{1} << 20, 4, 64, coll::chain_cut(fast)), 30843u);
  EXPECT_EQ(coll::chunks_of_size(size_t{1} << 20, 30843), 34u);
  EXPECT_EQ(coll::chain_chunk_elems(size_t{1} << 30, 1, 64, slow_cut), size_t{256} << 10);
  EXPECT_EQ(coll::chain_chunk_elems(size_t{512} << 10, 1, 2, slow_cut),
            coll::kNetworkMinChunkBytes);
  EXPECT_EQ(coll::chain_chunk_elems(size_t{512} << 10, 1, 8, coll::ChainCut{}),
            coll::kNetworkMinChunkBytes);
  // A buffer below the smallest chunk is one chunk.
  EXPECT_EQ(coll::chunks_of_size(1000, coll::chain_chunk_elems(1000, 4, 8, slow_cut)), 1u);
}

// The leaders exchange fingerprints and small data in ceil(log2 H) rounds where the messages the
// direct exchange adds cost more than the rounds: hand counts at step_us 11, message_us 7 (the
// defaults): 3 hosts, 2 rounds (22 + 28 us) against one (11 + 28): direct; 4 hosts, 22 + 28
// against 11 + 42: rounds; 5 hosts, 33 + 42 against 11 + 56: direct; 6, 33 + 42 against 11 + 70:
// rounds. With messages free, always direct; at 3.5 us a message from 8 hosts (33 + 21 against 11
// + 49), not on 7 (33 + 21 against 11 + 42).
TEST(NetworkCost, LeadersGatherInRoundsWhereTheirMessagesCostMoreThanTheRounds) {
  EXPECT_EQ(coll::gather_rounds(1), 0);
  EXPECT_EQ(coll::gather_rounds(2), 1);
  EXPECT_EQ(coll::gather_rounds(3), 2);
  EXPECT_EQ(coll::gather_rounds(4), 2);
  EXPECT_EQ(coll::gather_rounds(5), 3);
  EXPECT_EQ(coll::gather_rounds(8), 3);
  EXPECT_EQ(coll::gather_rounds(9), 4);
  EXPECT_EQ(coll::gather_rounds(12500), 14);
  const NetworkLinkCost defaults;
  EXPECT_FALSE(coll::leaders_gather_in_rounds(1, defaults));  // nobody to exchange with
  EXPECT_FALSE(coll::leaders_gather_in_rounds(2, defaults));  // one round either way
  EXPECT_FALSE(coll::leaders_gather_in_rounds(3, defaults));
  EXPECT_TRUE(coll::leaders_gather_in_rounds(4, defaults));
  EXPECT_FALSE(coll::leaders_gather_in_rounds(5, defaults));
  EXPECT_TRUE(coll::leaders_gather_in_rounds(6, defaults));
  EXPECT_TRUE(coll::leaders_gather_in_rounds(64, defaults));
  NetworkLinkCost free_messages;
  free_messages.message_us = 0;
  for (int hosts : {2, 4, 64, 12500})
    EXPECT_FALSE(coll::leaders_gather_in_rounds(hosts, free_messages));
  NetworkLinkCost cheaper;
  cheaper.message_us = 3.5;
  EXPECT_FALSE(coll::leaders_gather_in_rounds(7, cheaper));
  EXPECT_TRUE(coll::leaders_gather_in_rounds(8, cheaper));
}

// A personal exchange (each leader a block of its own to every other) in Bruck's rounds moves
// every block as many hops as its distance has set bits: 1, 2, 4, 5, 7 and 12 blocks a leader on
// 2, 3, 4, 5, 6 and 8 hosts. Hand counts at step_us 11, message_us 7: on 4 hosts of 100 Gb/s
// (12,500 B/us), 8 KiB pairs (0.655 us each), rounds 50 + 4 x 0.655 against direct 53 + 3 x
// 0.655: rounds; at 1 Gb/s (125 B/us) 8 KiB (65.5 us) 50 + 262 against 53 + 197: direct, 256 B
// (2.05 us) 50 + 8.2 against 53 + 6.1: rounds, 512 B (4.1 us) 50 + 16.4 against 53 + 12.3:
// direct. On 8 hosts at 1 Gb/s, 75 + 12 b against 109 + 7 b: rounds below b = 6.8 us (850 B).
TEST(NetworkCost, LeadersExchangeBlocksInRoundsWhereTheSavedMessagesOutweighTheExtraBytes) {
  EXPECT_EQ(coll::exchange_round_blocks(1), 0u);
  EXPECT_EQ(coll::exchange_round_blocks(2), 1u);
  EXPECT_EQ(coll::exchange_round_blocks(3), 2u);
  EXPECT_EQ(coll::exchange_round_blocks(4), 4u);
  EXPECT_EQ(coll::exchange_round_blocks(5), 5u);
  EXPECT_EQ(coll::exchange_round_blocks(6), 7u);
  EXPECT_EQ(coll::exchange_round_blocks(8), 12u);
  const NetworkLinkCost defaults;
  EXPECT_FALSE(coll::leaders_exchange_in_rounds(2, 8, defaults));
  EXPECT_FALSE(coll::leaders_exchange_in_rounds(3, 8, defaults));
  EXPECT_TRUE(coll::leaders_exchange_in_rounds(4, 8192, defaults));
  NetworkLinkCost gigabit;
  gigabit.link_gbps = 0.125;
  EXPECT_FALSE(coll::leaders_exchange_in_rounds(4, 8192, gigabit));
  EXPECT_TRUE(coll::leaders_exchange_in_rounds(4, 256, gigabit));
  EXPECT_FALSE(coll::leaders_exchange_in_rounds(4, 512, gigabit));
  EXPECT_TRUE(coll::leaders_exchange_in_rounds(8, 800, gigabit));
  EXPECT_FALSE(coll::leaders_exchange_in_rounds(8, 900, gigabit));
  NetworkLinkCost free_messages;
  free_messages.message_us = 0;
  for (int hosts : {4, 8, 64})
    EXPECT_FALSE(coll::leaders_exchange_in_rounds(hosts, 8, free_messages));
}

// The small rooted collectives whose senders go on (broadcast, scatter, gather, reduce) take a
// binomial tree where its ceil(log2 H) hops cost less than the root's H - 1 messages: hand counts
// at step_us 11, message_us 7: 4 hosts, 2 x 18 against 11 + 21: straight; 8 hosts, 3 x 18 against
// 11 + 49: the tree; 5, 3 x 18 against 11 + 28: straight. With messages free, never; at 1000 us a
// message from 4 hosts (2 x 1011 against 11 + 3000), not on 3 (2 x 1011 against 11 + 2000).
TEST(NetworkCost, SmallRootedCollectivesGoThroughATreeWhereTheRootsMessagesCostMoreThanItsHops) {
  const NetworkLinkCost defaults;
  EXPECT_FALSE(coll::rooted_in_tree(1, defaults));
  EXPECT_FALSE(coll::rooted_in_tree(2, defaults));
  EXPECT_FALSE(coll::rooted_in_tree(4, defaults));
  EXPECT_FALSE(coll::rooted_in_tree(5, defaults));
  EXPECT_TRUE(coll::rooted_in_tree(8, defaults));
  EXPECT_TRUE(coll::rooted_in_tree(64, defaults));
  NetworkLinkCost free_messages;
  free_messages.message_us = 0;
  for (int hosts : {2, 8, 12500}) EXPECT_FALSE(coll::rooted_in_tree(hosts, free_messages));
  NetworkLinkCost dear;
  dear.message_us = 1000;
  EXPECT_FALSE(coll::rooted_in_tree(3, dear));
  EXPECT_TRUE(coll::rooted_in_tree(4, dear));
}

// The choice counts the leaders' messages as leaders_gather_in_rounds and rooted_in_tree do.
// Hand counts at the defaults (call 4 us, step 11, message 7) on links of 0.125 GB/s (1 Gb/s: a
// 2 KiB buffer is 16.384 us through a link), 8 hosts:
// - broadcast, 2 KiB, root leading its host: the packed message down the tree, 3 hops of 11 + 7 +
//   16.384 after the call: 107.152 us. The chain: the fitted 4 + 8 x 11 + 7 x 16.384 (a
//   fingerprint round and 7 hops of the one chunk), the fingerprint round in 3 rounds
//   (3 x (11 + 14)) in place of its step (+64), 7 hops' messages (+49): 319.688. Before the
//   choice counted messages, and while the chain was priced as if it carried the buffer through
//   one link only (4 + 8 x 11 + 16.384 = 108.4 against 4 + 11 + 7 x 16.384 = 129.7 for one round
//   straight from the root), it took the chain.
// - The unpacked tree from a leading root: 3 hops of 11 + 16.384 after the call and 2 messages a
//   hop (the root's call, then the data): 86.152 + 42 = 128.152, above the packed message's tree.
// - The same with the root not its host's leader: one round is the root's 7 sends beside the
//   leaders' direct fingerprint exchange, 21 messages: 129.688 + 147; the tree's 3 hops, now with
//   the exchange's 14 messages and one a hop beside them: 86.152 + 119 = 205.152: the tree.
// - all_reduce, 4 KiB: one round, its step replaced by the exchange in rounds (+64 over the
//   fitted); pipelined, one segment: +64 and 4 x 7 x 7 = 196 messages.
TEST(NetworkCost, TheChoiceCountsTheLeadersMessages) {
  NetworkLinkCost c;
  c.link_gbps = 0.125;
  const double kib2 = 2048 / 125.0;
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::one_shot, 2048, 8, c),
      4 + 3 * (11 + 7 + kib2), 1e-9);
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::pipelined, 2048, 8, c),
      4 + 8 * 11 + 7 * kib2 + 64 + 49, 1e-9);
  EXPECT_NEAR(coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::one_shot, 2048, 8, c,
                                      /*root_leads=*/false),
              4 + 11 + 7 * kib2 + 21 * 7, 1e-9);
  EXPECT_NEAR(coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::tree, 2048, 8, c),
              4 + 3 * (11 + kib2) + 6 * 7, 1e-9);
  EXPECT_NEAR(coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::tree, 2048, 8, c,
                                      /*root_leads=*/false),
              4 + 3 * (11 + kib2) + 17 * 7, 1e-9);
  for (size_t bytes : {size_t{2048}, size_t{4096}, size_t{8192}}) {
    EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, bytes, 8, std::nullopt, c),
              NetworkAlgorithm::one_shot)
        << bytes;
  }
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, 2048, 8, std::nullopt, c, 1,
                                           /*root_leads=*/false),
            NetworkAlgorithm::tree);
  const double fitted_one_shot =
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::one_shot, 4096, 8, c);
  const double fitted_pipelined =
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::pipelined, 4096, 8, c);
  EXPECT_NEAR(
      coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::one_shot, 4096, 8, c),
      fitted_one_shot + 64, 1e-9);
  EXPECT_NEAR(
      coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::pipelined, 4096, 8, c),
      fitted_pipelined + 64 + 196, 1e-9);
  EXPECT_GT(fitted_one_shot, fitted_pipelined);  // what chose the 14 rounds before
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, 4096, 8, std::nullopt, c),
            NetworkAlgorithm::one_shot);
  // On two hosts a broadcast still goes in one round at every size one round may hold: the chain
  // moves the same bytes through the one link in more rounds, each with its message.
  EXPECT_EQ(
      coll::choose_network_algorithm(Collective::broadcast, size_t{16} << 20, 2, std::nullopt, c),
      NetworkAlgorithm::one_shot);
}

// One round holds 64 KiB a message where every leader waits for the round's messages, 60 KiB
// where the senders go on without waiting (the rooted collectives, whose messages arrive before
// their receives); UCX sends a packed message eagerly.
TEST(NetworkCost, OneRoundHoldsLessWhereTheSendersDoNotWait) {
  for (Collective op : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                        Collective::all_to_all}) {
    EXPECT_EQ(coll::network_packed_bytes(op), size_t{64} << 10) << coll::collective_name(op);
  }
  for (Collective op :
       {Collective::broadcast, Collective::reduce, Collective::gather, Collective::scatter}) {
    EXPECT_EQ(coll::network_packed_bytes(op), size_t{60} << 10) << coll::collective_name(op);
  }
  EXPECT_GT(coll::kNetworkEagerBytes, coll::kNetworkPackedBytes);
  // A one-shot all_reduce just over the one-round size pays the fingerprints' messages beside
  // the data's (4 (H - 1) of them), just under it the one exchange.
  const NetworkLinkCost c = known_cost();
  const auto one_shot_us = [&](size_t bytes) {
    return coll::network_choice_us(Collective::all_reduce, NetworkAlgorithm::one_shot, bytes, 4,
                                   c) -
           coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::one_shot, bytes, 4,
                                    c);
  };
  EXPECT_NEAR(one_shot_us(coll::kNetworkPackedBytes + 1), 12 * c.message_us, 1e-9);
  EXPECT_LT(one_shot_us(coll::kNetworkPackedBytes), 12 * c.message_us);
}

// A reduce goes in one round where the other hosts' partial results pack together and the root's
// link taking all of them costs no more than the slices. Hand counts at the defaults (a step
// 11 us, a message 7) on links of 0.125 GB/s, 4 hosts (the root's leader takes its 3 messages
// directly, 11 + 21 = 32, rather than in 2 tree rounds of 18; the leaders' fingerprints go in 2
// rounds of 11 + 14, 50, rather than directly, 11 + 42 = 53):
// - 8 KiB (65.536 us through a link): one round 32 + 3 x 65.536 = 228.608; slices 50 + 2 x (11 +
//   21) + 65.536 = 179.536: the slices;
// - 4 KiB: one round 32 + 98.304 = 130.304; slices 50 + 64 + 32.768 = 146.768: one round.
// At 100 Gb/s the round wins wherever it packs (20 KiB a host on 4 hosts: 60 KiB together);
// on two hosts always where it packs, the root's link taking the other host's data either way.
TEST(NetworkCost, AReduceGoesInOneRoundWhereItPacksAndTheRootsLinkCanTakeIt) {
  NetworkLinkCost slow;
  slow.link_gbps = 0.125;
  EXPECT_FALSE(coll::reduce_in_one_round(8192, 4, slow));
  EXPECT_TRUE(coll::reduce_in_one_round(4096, 4, slow));
  const NetworkLinkCost fast;
  const size_t most = coll::kNetworkRootedPackedBytes / 3;
  EXPECT_TRUE(coll::reduce_in_one_round(most, 4, fast));
  EXPECT_FALSE(coll::reduce_in_one_round(most + 1, 4, fast));
  EXPECT_TRUE(coll::reduce_in_one_round(coll::kNetworkRootedPackedBytes, 2, slow));
  EXPECT_FALSE(coll::reduce_in_one_round(coll::kNetworkRootedPackedBytes + 1, 2, fast));
}

// A communicator remembers its choices (NetworkChoices): each is the one choose_network_algorithm
// makes, computed once per (collective, size, leading root) while it keeps its slot, and again
// after another key took it.
TEST(NetworkCost, RememberedChoicesAreTheModelsAndComputedOncePerKey) {
  NetworkLinkCost c;
  c.link_gbps = 0.125;
  coll::NetworkChoices choices;
  int computed = 0;
  struct Key {
    Collective op;
    size_t bytes;
    bool root_leads;
  };
  const std::vector<Key> keys = {{Collective::broadcast, 2048, true},
                                 {Collective::broadcast, 2048, false},
                                 {Collective::broadcast, size_t{16} << 10, true},
                                 {Collective::all_reduce, 2048, true},
                                 {Collective::all_reduce, size_t{64} << 20, true},
                                 {Collective::broadcast, size_t{256} << 10, true}};
  for (int pass = 0; pass < 2; ++pass) {
    for (const Key& k : keys) {
      const NetworkAlgorithm direct =
          coll::choose_network_algorithm(k.op, k.bytes, 8, std::nullopt, c, 1, k.root_leads);
      EXPECT_EQ(choices.get(k.op, k.bytes, k.root_leads,
                            [&] {
                              ++computed;
                              return direct;
                            }),
                direct)
          << k.bytes;
    }
  }
  EXPECT_EQ(computed, static_cast<int>(keys.size()));  // the second pass remembered them all
  // More keys than slots (64): some evict others, which are then computed again, with the same
  // answer.
  computed = 0;
  const int many = 100;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < many; ++i) {
      const size_t bytes = size_t{1024} * static_cast<size_t>(i + 1);
      const NetworkAlgorithm direct =
          coll::choose_network_algorithm(Collective::all_reduce, bytes, 8, std::nullopt, c);
      EXPECT_EQ(choices.get(Collective::all_reduce, bytes, true,
                            [&] {
                              ++computed;
                              return direct;
                            }),
                direct)
          << bytes;
    }
  }
  EXPECT_GT(computed, many);
  EXPECT_LT(computed, 2 * many);  // and those alone in their slot stayed
}

// The tree takes a broadcast's mid sizes on many hosts. Hand counts at the defaults on links of
// 0.125 GB/s (a 96 KiB buffer is 786.432 us through a link), 8 hosts, 96 KiB (more than one
// round holds):
// - one round: the root's 7 copies through its link after a step and the call (4 + 11 +
//   5505.024), and 21 messages: 5667.024 us;
// - the tree: 3 hops of 11 + 786.432 after the call, 2 messages a hop: 2396.296 + 42 = 2438.296;
// - the chain: 3 chunks of 32 KiB, a fingerprint round and 10 steps (4 + 110), the buffer through
//   its first link and a chunk through each of the 6 after (2359.296), its round in 3 rounds (+64)
//   and 9 hops' messages (+63): 2600.296.
// At 16 KiB, which one round holds, the one round goes down the same tree with the data behind
// the root's call in one message (broadcast_unacknowledged): 4 + 3 x (11 + 131.072) and a
// message a hop, 451.216, against the tree's 472.216.
// At 256 KiB the chain's 8 chunks of 32 KiB fill its 6 first links with a chunk each: 4 + 15 x 11
// + (262144 + 6 x 32768) / 125 + 64 + 14 x 7 = 4001.016, against the tree's 3 hops of 2097 us.
// Two hosts never take it (it is the one round there), all_reduce has none; forced, a broadcast
// takes it wherever it is.
TEST(NetworkCost, TheTreeTakesMidSizedBroadcastsOnManyHosts) {
  NetworkLinkCost c;
  c.link_gbps = 0.125;
  const size_t kib96 = size_t{96} << 10;
  const double link96 = 98304 / 125.0;
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::one_shot, kib96, 8, c),
      4 + 11 + 7 * link96 + 21 * 7, 1e-9);
  EXPECT_NEAR(coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::tree, kib96, 8, c),
              4 + 3 * (11 + link96) + 6 * 7, 1e-9);
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::pipelined, kib96, 8, c),
      4 + 10 * 11 + (98304 + 6 * 32768) / 125.0 + 64 + 9 * 7, 1e-9);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, kib96, 8, std::nullopt, c),
            NetworkAlgorithm::tree);
  const size_t kib16 = size_t{16} << 10;
  const double link16 = 16384 / 125.0;
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::one_shot, kib16, 8, c),
      4 + 3 * (11 + link16) + 3 * 7, 1e-9);
  EXPECT_NEAR(coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::tree, kib16, 8, c),
              4 + 3 * (11 + link16) + 6 * 7, 1e-9);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, kib16, 8, std::nullopt, c),
            NetworkAlgorithm::one_shot);
  const size_t kib256 = size_t{256} << 10;
  EXPECT_NEAR(
      coll::network_choice_us(Collective::broadcast, NetworkAlgorithm::pipelined, kib256, 8, c),
      4 + 15 * 11 + (262144 + 6 * 32768) / 125.0 + 64 + 14 * 7, 1e-9);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, kib256, 8, std::nullopt, c),
            NetworkAlgorithm::pipelined);
  for (size_t bytes = 8; bytes <= (size_t{256} << 20); bytes *= 4) {
    EXPECT_NE(coll::choose_network_algorithm(Collective::broadcast, bytes, 2, std::nullopt, c),
              NetworkAlgorithm::tree)
        << bytes;
    EXPECT_NE(coll::choose_network_algorithm(Collective::all_reduce, bytes, 8, std::nullopt, c),
              NetworkAlgorithm::tree)
        << bytes;
  }
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, size_t{64} << 20, 2,
                                           NetworkAlgorithm::tree, c),
            NetworkAlgorithm::tree);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, 8, 8, NetworkAlgorithm::tree, c),
            NetworkAlgorithm::one_shot);  // not forced: the model's choice
}

// Rounds of a network algorithm's path, in the order the choice goes through them as a buffer
// grows: one round, the tree's ceil(log2 H), the chain's or the segments' many.
int rounds_order(NetworkAlgorithm a) {
  return a == NetworkAlgorithm::one_shot ? 0 : a == NetworkAlgorithm::tree ? 1 : 2;
}

TEST(NetworkCost, ChoosesOneShotForSmallMessagesAndPipelinedForLargeOnes) {
  for (const NetworkLinkCost& c : {known_cost(), NetworkLinkCost{}}) {
    for (Collective op : {Collective::all_reduce, Collective::broadcast}) {
      for (int hosts : {2, 3, 4, 8, 64}) {
        EXPECT_EQ(coll::choose_network_algorithm(op, 8, hosts, std::nullopt, c),
                  NetworkAlgorithm::one_shot);
        EXPECT_EQ(coll::choose_network_algorithm(op, size_t{256} << 20, hosts, std::nullopt, c),
                  NetworkAlgorithm::pipelined);
        // Crossovers one way only: once a form of more rounds wins, no form of fewer wins at a
        // larger size.
        int most = 0;
        for (size_t bytes = 8; bytes <= (size_t{256} << 20); bytes *= 2) {
          const int order =
              rounds_order(coll::choose_network_algorithm(op, bytes, hosts, std::nullopt, c));
          EXPECT_GE(order, most) << bytes << " B, " << hosts;
          most = std::max(most, order);
        }
      }
    }
  }
  const NetworkLinkCost c = known_cost();
  // Forced where it applies; never a one-shot that would hold more than kMaxOneShotBytes.
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, size_t{8} << 20, 4,
                                           NetworkAlgorithm::one_shot, c),
            NetworkAlgorithm::one_shot);
  EXPECT_EQ(
      coll::choose_network_algorithm(Collective::all_reduce, 8, 4, NetworkAlgorithm::pipelined, c),
      NetworkAlgorithm::pipelined);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, coll::kMaxOneShotBytes, 3,
                                           NetworkAlgorithm::one_shot, c),
            NetworkAlgorithm::pipelined);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_gather, 8, 4, std::nullopt, c),
            NetworkAlgorithm::pipelined);
}

// Where every host's L >= 2 ranks are usable rails, all_reduce's and broadcast's pipelined forms
// run per rail; one rank per host, an uneven layout or rails sharing links (rails = 1) never do;
// forcing names the form.
TEST(NetworkCost, PipelinedFormsGoPerRailWhereTheLayoutHasRailsToUse) {
  const NetworkLinkCost c = known_cost();
  const size_t large = size_t{256} << 20;
  for (int rails : {2, 8}) {
    EXPECT_EQ(
        coll::choose_network_algorithm(Collective::all_reduce, large, 4, std::nullopt, c, rails),
        NetworkAlgorithm::per_rail);
    EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, 8, 4, std::nullopt, c, rails),
              NetworkAlgorithm::one_shot);
    EXPECT_EQ(
        coll::choose_network_algorithm(Collective::broadcast, large, 4, std::nullopt, c, rails),
        NetworkAlgorithm::per_rail);
    EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, 8, 4, std::nullopt, c, rails),
              NetworkAlgorithm::one_shot);
    EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, 8, 4,
                                             NetworkAlgorithm::per_rail, c, rails),
              NetworkAlgorithm::per_rail);
    EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, large, 4,
                                             NetworkAlgorithm::pipelined, c, rails),
              NetworkAlgorithm::pipelined);
    // Per rail is priced as the leaders' pipelined form of 1/rails of the buffer (each rail
    // carries its share through a link of its own), against one round and (broadcast) the
    // leaders' tree of the whole buffer.
    for (Collective op : {Collective::all_reduce, Collective::broadcast}) {
      for (size_t bytes = 8; bytes <= large; bytes *= 2) {
        const size_t landed = op == Collective::all_reduce ? 3 * bytes : bytes;
        const double per_rail_us = coll::network_choice_us(
            op, NetworkAlgorithm::pipelined, bytes / static_cast<size_t>(rails), 4, c);
        const double tree_us =
            op == Collective::broadcast
                ? coll::network_choice_us(op, NetworkAlgorithm::tree, bytes, 4, c)
                : per_rail_us + 1;
        const double one_shot_us =
            landed <= coll::kMaxOneShotBytes
                ? coll::network_choice_us(op, NetworkAlgorithm::one_shot, bytes, 4, c)
                : per_rail_us + tree_us;
        const NetworkAlgorithm want = one_shot_us <= std::min(per_rail_us, tree_us)
                                          ? NetworkAlgorithm::one_shot
                                      : tree_us <= per_rail_us ? NetworkAlgorithm::tree
                                                               : NetworkAlgorithm::per_rail;
        EXPECT_EQ(coll::choose_network_algorithm(op, bytes, 4, std::nullopt, c, rails), want)
            << coll::collective_name(op) << " " << bytes;
      }
    }
  }
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, large, 4, std::nullopt, c, 1),
            NetworkAlgorithm::pipelined);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, large, 4, std::nullopt, c, 1),
            NetworkAlgorithm::pipelined);
  // A broadcast between two hosts: one round moves what the chain moves through the one link, in
  // fewer rounds, so the leaders send it in one round up to its limit; two rails, each carrying
  // half through a link of its own, beat it.
  const size_t mid = size_t{16} << 20;
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, mid, 2, std::nullopt, c, 1),
            NetworkAlgorithm::one_shot);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::broadcast, mid, 2, std::nullopt, c, 2),
            NetworkAlgorithm::per_rail);
  EXPECT_EQ(coll::choose_network_algorithm(Collective::all_reduce, large, 4,
                                           NetworkAlgorithm::per_rail, c, 1),
            NetworkAlgorithm::pipelined);
  EXPECT_EQ(coll::parse_network_algorithm("per_rail"), NetworkAlgorithm::per_rail);
  EXPECT_STREQ(coll::network_algorithm_name(NetworkAlgorithm::per_rail), "per_rail");
  EXPECT_TPF_ERROR(
      coll::predict_network_us(Collective::all_reduce, NetworkAlgorithm::per_rail, large, 4, c),
      ErrorCode::invalid_argument, "per_rail");
}

// Runs of both collectives and algorithms on `hosts` hosts, timed by the model itself.
std::vector<NetworkMeasurement> synthetic(const NetworkLinkCost& cost, int hosts) {
  std::vector<NetworkMeasurement> out;
  for (Collective op : {Collective::all_reduce, Collective::broadcast}) {
    for (NetworkAlgorithm a : {NetworkAlgorithm::one_shot, NetworkAlgorithm::pipelined}) {
      for (size_t bytes = 8; bytes <= (size_t{8} << 20); bytes *= 4) {
        NetworkMeasurement m;
        m.collective = op;
        m.algorithm = a;
        m.hosts = hosts;
        m.bytes = bytes;
        m.min_slice_bytes = coll::all_reduce_min_slice_bytes(cost);  // what such a run records
        m.chain = coll::chain_cut(cost);
        m.measured_us = coll::predict_network_us(op, a, bytes, hosts, cost);
        m.source = "synthetic";
        out.push_back(m);
      }
    }
  }
  return out;
}

TEST(NetworkCalibration, RecoversKnownConstantsAndPredictsOtherHostCounts) {
  const NetworkLinkCost truth = known_cost();
  const NetworkFit fit = fit_network_link_cost(synthetic(truth, 2), NetworkLinkCost{});
  EXPECT_NEAR(fit.cost.call_us, truth.call_us, 1e-6 * truth.call_us);
  EXPECT_NEAR(fit.cost.step_us, truth.step_us, 1e-6 * truth.step_us);
  EXPECT_NEAR(fit.cost.link_gbps, truth.link_gbps, 1e-6 * truth.link_gbps);
  EXPECT_NEAR(fit.cost.reduce_gbps, truth.reduce_gbps, 1e-6 * truth.reduce_gbps);
  EXPECT_EQ(fit.fitted.size(), 4u);
  EXPECT_LT(fit.train_max_rel_error, 1e-9);
  for (int hosts : {3, 4, 16}) {
    EXPECT_LT(evaluate(fit.cost, synthetic(truth, hosts)).max_abs_rel_error, 1e-9) << hosts;
  }
  // A mis-set prior does not leak into fitted constants, and a wrong model shows as error.
  NetworkLinkCost slow = truth;
  slow.link_gbps = 0.5;
  EXPECT_GT(evaluate(slow, synthetic(truth, 2)).max_abs_rel_error, 0.5);
}

TEST(NetworkCalibration, PointsThatCannotSeparateTheConstantsAreAClearError) {
  std::vector<NetworkMeasurement> one_size;
  for (const NetworkMeasurement& m : synthetic(known_cost(), 2)) {
    if (m.bytes == 8 * 4 * 4 && m.collective == Collective::broadcast) one_size.push_back(m);
  }
  EXPECT_TPF_ERROR(fit_network_link_cost(one_size), ErrorCode::invalid_argument, "cannot separate");
  EXPECT_TPF_ERROR(fit_network_link_cost({}), ErrorCode::invalid_argument, "no training");
}

std::string bench_json(const std::string& collective, int nranks, int hosts,
                       const std::string& algorithm) {
  std::string s = "{\"collective\":\"" + collective + "\",\"nranks\":" + std::to_string(nranks) +
                  ",\"hosts\":" + std::to_string(hosts);
  if (!algorithm.empty()) s += ",\"network_algorithm\":\"" + algorithm + "\"";
  s += ",\"rows\":[{\"bytes\":0,\"count\":0,\"oop\":{\"time_us\":5,\"wrong\":0},\"ip\":null},"
       "{\"bytes\":1024,\"count\":256,\"oop\":{\"time_us\":40.5,\"wrong\":0},"
       "\"ip\":{\"time_us\":41,\"wrong\":null}}]}";
  return s;
}

TEST(NetworkCalibration, ReadsBenchFilesAndNamesWhatIsWrong) {
  const auto points =
      parse_network_bench_json(bench_json("all_reduce", 3, 3, "pipelined"), "f.json");
  ASSERT_EQ(points.size(), 2u);  // the empty row is skipped
  EXPECT_EQ(points[0].hosts, 3);
  EXPECT_EQ(points[0].algorithm, NetworkAlgorithm::pipelined);
  EXPECT_EQ(points[0].bytes, 1024u);
  EXPECT_DOUBLE_EQ(points[0].measured_us, 40.5);
  EXPECT_TRUE(points[1].in_place);
  // A run that does not record its slice predates its dependence on the settings: 512 KiB.
  EXPECT_EQ(points[0].min_slice_bytes, size_t{512} << 10);
  std::string with_slice = bench_json("all_reduce", 3, 3, "pipelined");
  with_slice.insert(1, "\"network_min_slice_bytes\":131072,");
  EXPECT_EQ(parse_network_bench_json(with_slice, "f.json")[0].min_slice_bytes, 131072u);
  std::string bad_slice = bench_json("all_reduce", 3, 3, "pipelined");
  bad_slice.insert(1, "\"network_min_slice_bytes\":0,");
  EXPECT_TPF_ERROR(parse_network_bench_json(bad_slice, "f.json"), ErrorCode::invalid_argument,
                   "'network_min_slice_bytes' is 0");
  // The chain's cut: recorded (the run's step + message and link), or the fixed one before.
  EXPECT_EQ(points[0].chain.round_us, 0.0);
  std::string with_cut = bench_json("broadcast", 3, 3, "pipelined");
  with_cut.insert(1, "\"network_chain_round_us\":18,\"network_chain_gbps\":0.125,");
  const NetworkMeasurement cut = parse_network_bench_json(with_cut, "f.json")[0];
  EXPECT_EQ(cut.chain.round_us, 18.0);
  EXPECT_EQ(cut.chain.link_gbps, 0.125);
  std::string half_cut = bench_json("broadcast", 3, 3, "pipelined");
  half_cut.insert(1, "\"network_chain_round_us\":18,");
  EXPECT_TPF_ERROR(parse_network_bench_json(half_cut, "f.json"), ErrorCode::invalid_argument,
                   "network_chain_gbps");
  std::string bad_cut = bench_json("broadcast", 3, 3, "pipelined");
  bad_cut.insert(1, "\"network_chain_round_us\":-1,\"network_chain_gbps\":0.125,");
  EXPECT_TPF_ERROR(parse_network_bench_json(bad_cut, "f.json"), ErrorCode::invalid_argument,
                   "expected positive numbers");
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_reduce", 3, 3, "automatic"), "f.json"),
                   ErrorCode::invalid_argument, "TPF_NET_ALGO");
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_reduce", 3, 3, ""), "f.json"),
                   ErrorCode::invalid_argument, "network_algorithm");
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_reduce", 3, 3, "per_rail"), "f.json"),
                   ErrorCode::invalid_argument, "expected one_shot or pipelined");
  // A broadcast's tree is priced; all_reduce has none.
  EXPECT_EQ(parse_network_bench_json(bench_json("broadcast", 4, 4, "tree"), "f.json")[0].algorithm,
            NetworkAlgorithm::tree);
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_reduce", 4, 4, "tree"), "f.json"),
                   ErrorCode::invalid_argument, "'tree' for all_reduce");
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_reduce", 4, 2, "one_shot"), "f.json"),
                   ErrorCode::invalid_argument, "one rank on each");
  EXPECT_TPF_ERROR(parse_network_bench_json(bench_json("all_gather", 2, 2, "one_shot"), "f.json"),
                   ErrorCode::invalid_argument, "all_reduce and broadcast");
  EXPECT_TPF_ERROR(parse_network_bench_json("[1]", "f.json"), ErrorCode::invalid_argument,
                   "f.json");
}

// The runs saved from this machine (bench/net/network_calibration.sh): fitted on 2 hosts, the
// model must predict the 2-host runs and the bandwidth-bound runs (>= 128 KiB) on 3 and 4 hosts
// within the errors stated in docs/fabric.md (median 4 %; the worst, -21 %, a 4-host one-shot
// all_reduce that reached 0.81 of the link with 4 ranks on 2 cores).
TEST(NetworkCalibration, FitOnTheSavedRunsPredictsThemWithinTheStatedError) {
  const std::filesystem::path dir =
      std::filesystem::path(TPF_SOURCE_DIR) / "docs/results/calibration-network";
  std::vector<NetworkMeasurement> training, large_elsewhere;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    for (const NetworkMeasurement& m : read_network_bench_file(entry.path().string())) {
      if (m.hosts == 2) training.push_back(m);
      if (m.hosts != 2 && m.bytes >= (size_t{128} << 10)) large_elsewhere.push_back(m);
    }
  }
  ASSERT_GE(training.size(), 40u) << "bench/net/network_calibration.sh writes them";
  ASSERT_FALSE(large_elsewhere.empty());
  const NetworkFit fit = fit_network_link_cost(median_of_repeats(training));
  EXPECT_LT(fit.train_median_rel_error, 0.10);
  const NetworkEvaluation held = evaluate(fit.cost, median_of_repeats(large_elsewhere));
  EXPECT_LT(held.median_abs_rel_error, 0.08);
  EXPECT_LT(held.max_abs_rel_error, 0.25);
}

}  // namespace
}  // namespace tpf::plan
