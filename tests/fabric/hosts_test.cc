// Hosts (topo/hosts.h, comm/host_discovery.h): which ranks share memory is decided from host keys
// exchanged through the store, never from launcher variables. A communicator whose ranks are on
// different hosts must not run over /dev/shm — not even when the "hosts" are network namespaces
// of one machine, which can still see each other's segments.
#include "topo/hosts.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/across_hosts.h"
#include "coll/network_cost.h"
#include "comm/comm_impl.h"
#include "comm/settings.h"
#include "support/expect_error.h"
#include "support/expect_tpf_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {
namespace {

using testing::RankContext;

TEST(HostMap, HostsAreNumberedByTheirLowestRankAndLocalRanksFollowRankOrder) {
  const topo::HostMap map({"b", "a", "b", "c", "a"});
  EXPECT_EQ(map.ranks(), 5);
  EXPECT_EQ(map.hosts(), 3);
  EXPECT_FALSE(map.single_host());
  EXPECT_FALSE(map.uniform());
  EXPECT_EQ(map.key(0), "b");
  EXPECT_EQ(map.key(1), "a");
  EXPECT_EQ(map.key(2), "c");
  EXPECT_EQ(map.host_of(3), 2);
  EXPECT_EQ(map.ranks_on(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(map.ranks_on(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(map.local_rank(2), 1);
  EXPECT_EQ(map.local_rank(4), 1);
  EXPECT_EQ(map.local_rank(3), 0);
  EXPECT_EQ(map.describe(), "host 'b' (ranks 0, 2); host 'a' (ranks 1, 4); host 'c' (rank 3)");
  // Rails: the same local rank on the other hosts; host 'c' has no local rank 1.
  EXPECT_EQ(map.rail_of(0), (std::vector<int>{1, 3}));
  EXPECT_EQ(map.rail_of(3), (std::vector<int>{0, 1}));
  EXPECT_EQ(map.rail_of(2), (std::vector<int>{4}));
  EXPECT_EQ(map.rail_of(4), (std::vector<int>{2}));
}

// The peers a rank connects to while a communicator across hosts is made: on other hosts, and
// symmetric (each waits for a first message from each of its own), in uniform, uneven and
// interleaved layouts; a rank's rail and heartbeat pairs, not every rank.
TEST(FirstNetworkPeers, AreOnOtherHostsAndSymmetric) {
  const std::vector<std::vector<std::string>> layouts = {{"a", "b"},
                                                         {"a", "a", "b"},
                                                         {"a", "a", "b", "b", "c", "c", "d", "d"},
                                                         {"a", "b", "a", "b", "c", "c"},
                                                         {"a", "a", "a", "b", "c", "c"},
                                                         {"a", "b", "c", "d", "e"}};
  for (const auto& keys : layouts) {
    const topo::HostMap map(keys);
    for (int r = 0; r < map.ranks(); ++r) {
      const std::vector<int> first = detail::first_network_peers(map, r);
      EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
      for (int p : first) {
        EXPECT_NE(map.host_of(p), map.host_of(r)) << "rank " << r << " lists " << p;
        const std::vector<int> theirs = detail::first_network_peers(map, p);
        EXPECT_TRUE(std::find(theirs.begin(), theirs.end(), r) != theirs.end())
            << "rank " << r << " lists rank " << p << ", which does not list it back ("
            << map.describe() << ")";
      }
    }
  }
  // 4 hosts x 2: rank 3 (host 1, local 1) has its rail (ranks 1, 5, 7) and its watcher, rank 0
  // (the leader of host 0); rank 2, host 1's leader, also the ranks of host 2 it watches.
  const topo::HostMap four_by_two({"a", "a", "b", "b", "c", "c", "d", "d"});
  EXPECT_EQ(detail::first_network_peers(four_by_two, 3), (std::vector<int>{0, 1, 5, 7}));
  EXPECT_EQ(detail::first_network_peers(four_by_two, 2), (std::vector<int>{0, 4, 5, 6}));
}

// The pairs put + signal gives slots to: on the rank's rail (other hosts, same local rank),
// symmetric, and exactly the partners the rails' algorithms use: positions 2^k apart either way
// round the rail (rings, binomial trees from any root, the leaders' rounds) and halving-doubling's
// partners (coll::HalvingDoubling's pairs and rounds), in uniform, uneven and interleaved
// layouts; and on 1,000 hosts a rank gives at most 25 peers slots instead of 999.
TEST(RailPartners, AreTheRailAlgorithmsPartnersAndSymmetric) {
  auto hosts_of_one = [](int hosts) {
    std::vector<std::string> keys;
    for (int h = 0; h < hosts; ++h) keys.push_back("h" + std::to_string(h));
    return keys;
  };
  std::vector<std::vector<std::string>> layouts = {{"a", "b"},
                                                   {"a", "a", "b"},
                                                   {"a", "a", "b", "b", "c", "c", "d", "d"},
                                                   {"a", "b", "a", "b", "c", "c"},
                                                   {"a", "a", "a", "b", "c", "c"}};
  for (int hosts : {3, 5, 6, 7, 8, 12, 13, 33}) layouts.push_back(hosts_of_one(hosts));
  for (const auto& keys : layouts) {
    const topo::HostMap map(keys);
    for (int r = 0; r < map.ranks(); ++r) {
      // The rail, `r` included, and r's position on it.
      std::vector<int> rail{r};
      for (int p : map.rail_of(r)) rail.push_back(p);
      std::sort(rail.begin(), rail.end(),
                [&](int a, int b) { return map.host_of(a) < map.host_of(b); });
      const int n = static_cast<int>(rail.size());
      const int me = static_cast<int>(std::find(rail.begin(), rail.end(), r) - rail.begin());
      const coll::HalvingDoubling shape(n);
      auto is_partner = [&](int position) {
        const int ahead = (position - me + n) % n, behind = (me - position + n) % n;
        if (std::has_single_bit(static_cast<unsigned>(ahead)) ||
            std::has_single_bit(static_cast<unsigned>(behind)))
          return true;
        const int a = shape.position_of(me), b = shape.position_of(position);
        if (a < 0 || b < 0) return false;  // a pair's odd host: its even one, 1 before (above)
        return std::has_single_bit(static_cast<unsigned>(a ^ b));
      };
      std::vector<int> expected;
      for (int position = 0; position < n; ++position)
        if (position != me && is_partner(position)) expected.push_back(rail[position]);
      std::sort(expected.begin(), expected.end());
      const std::vector<int> partners = coll::rail_partners(map, r);
      EXPECT_EQ(partners, expected) << "rank " << r << " of " << map.describe();
      for (int p : partners) {
        const std::vector<int> theirs = coll::rail_partners(map, p);
        EXPECT_TRUE(std::find(theirs.begin(), theirs.end(), r) != theirs.end())
            << "rank " << r << " lists rank " << p << ", which does not list it back ("
            << map.describe() << ")";
      }
    }
  }
  const topo::HostMap eight(hosts_of_one(8));
  EXPECT_EQ(coll::rail_partners(eight, 0), (std::vector<int>{1, 2, 4, 6, 7}));
  const topo::HostMap four_by_two({"a", "a", "b", "b", "c", "c", "d", "d"});
  EXPECT_EQ(coll::rail_partners(four_by_two, 3), (std::vector<int>{1, 5, 7}));
  const topo::HostMap thousand(hosts_of_one(1000));
  size_t most = 0;  // bounded by 2 ceil(log2 H) distances, log2 P rounds and a pair: 31
  for (int r = 0; r < 1000; ++r) most = std::max(most, coll::rail_partners(thousand, r).size());
  EXPECT_EQ(most, 25u);
}

TEST(HostMap, OneKeyIsOneUniformHost) {
  const topo::HostMap map({"x", "x", "x"});
  EXPECT_TRUE(map.single_host());
  EXPECT_TRUE(map.uniform());
  EXPECT_EQ(map.ranks_on(0).size(), 3u);
}

// The ranks that share a rank's cores are those of its machine, across hosts: two emulated hosts
// of one machine (network namespaces) count together; without machine keys, each host is one.
TEST(HostMap, CountsTheRanksOfEachMachineAcrossItsHosts) {
  const std::vector<std::string> keys = {"a", "a", "b", "b", "c"};
  const topo::HostMap shared(keys, {}, {"m1", "m1", "m1", "m1", "m2"});
  EXPECT_EQ(shared.hosts(), 3);
  EXPECT_EQ(shared.ranks_on_machine_of(0), 4);
  EXPECT_EQ(shared.ranks_on_machine_of(3), 4);
  EXPECT_EQ(shared.ranks_on_machine_of(4), 1);
  const topo::HostMap own(keys);
  EXPECT_EQ(own.ranks_on_machine_of(0), 2);
  EXPECT_EQ(own.ranks_on_machine_of(2), 2);
  EXPECT_EQ(own.ranks_on_machine_of(4), 1);
}

// Rails have links of their own only where every rank of a host names devices no other rank of
// that host names; the same device on two hosts is no overlap (each host has its own eth0).
TEST(HostMap, RailsHaveLinksOfTheirOwnWhereEachRankOfAHostNamesItsOwnDevices) {
  using Keys = std::vector<std::string>;
  const Keys two_of_two = {"a", "a", "b", "b"};
  const auto own_links = [](const Keys& keys, const Keys& devices) {
    return topo::HostMap(keys, devices).rails_have_own_links();
  };
  EXPECT_TRUE(own_links(two_of_two, {"eth0", "eth1", "eth0", "eth1"}));
  EXPECT_TRUE(own_links(two_of_two, {"mlx5_0:1", "mlx5_1:1,mlx5_2:1", "mlx5_1:1", "mlx5_0:1"}));
  EXPECT_TRUE(own_links({"a", "b", "a", "b"}, {"eth0", "eth0", "eth1", "eth1"}));  // interleaved
  EXPECT_FALSE(topo::HostMap(two_of_two).rails_have_own_links());  // no devices known: "all"
  EXPECT_FALSE(own_links(two_of_two, {"all", "all", "all", "all"}));
  EXPECT_FALSE(own_links(two_of_two, {"eth0", "eth0", "eth0", "eth1"}));       // shared
  EXPECT_FALSE(own_links(two_of_two, {"eth0,eth1", "eth1", "eth0", "eth1"}));  // overlap
  EXPECT_FALSE(own_links(two_of_two, {"eth0", "all", "eth0", "eth1"}));        // all
  EXPECT_FALSE(own_links(two_of_two, {"eth0", "eth1,", "eth0", "eth1"}));      // empty entry
  EXPECT_FALSE(own_links(two_of_two, {"eth0", "^eth0", "eth0", "eth1"}));      // exclusion
  EXPECT_FALSE(own_links({"a", "a", "b"}, {"eth0", "eth1", "eth0"}));          // not uniform
  EXPECT_FALSE(own_links({"a", "b"}, {"eth0", "eth1"}));                       // one rank each
}

TEST(HostKey, NodeIdWinsAndTheDerivedKeyIsStableAndReadable) {
  EXPECT_EQ(topo::local_host_key(std::string("node-7")), "node-7");
  const std::string derived = topo::local_host_key(std::nullopt);
  EXPECT_EQ(derived, topo::local_host_key(std::nullopt));
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(derived.rfind(name, 0), 0u) << derived;
  EXPECT_NE(derived.find("net "), std::string::npos) << derived;
}

// What a test emulating hosts on one machine does: a process in its own network namespace is on
// another host, even though /dev/shm is the same.
TEST(HostKey, AnotherNetworkNamespaceIsAnotherHost) {
  const std::string here = topo::local_host_key(std::nullopt);
  testing::SharedBlock shared;
  auto outcomes = testing::run_ranks_raw(1, [&](const RankContext&) {
    TPF_CHILD_CHECK(::unshare(CLONE_NEWNET) == 0,
                    std::string("unshare(CLONE_NEWNET) (needs root): ") + std::strerror(errno));
    const std::string there = topo::local_host_key(std::nullopt);
    TPF_CHILD_CHECK(there != here, "same key in a new network namespace: " + there);
  });
  testing::expect_all_ok(outcomes);
}

TEST(HostKey, MalformedNodeIdIsAnErrorNamingIt) {
  for (const std::string& bad :
       std::vector<std::string>{"has space", "tab\there", std::string(129, 'n')}) {
    ::setenv("TPF_NODE_ID", bad.c_str(), 1);
    EXPECT_TPF_ERROR(detail::resolve_comm_settings(), ErrorCode::invalid_argument, "TPF_NODE_ID");
  }
  ::setenv("TPF_NODE_ID", "rack1-node2", 1);
  const detail::CommSettings settings = detail::resolve_comm_settings();
  EXPECT_EQ(settings.host_key, "rack1-node2");
  ASSERT_NE(settings.reported("TPF_NODE_ID"), nullptr);
  EXPECT_EQ(settings.reported("TPF_NODE_ID")->source, "TPF_NODE_ID");
  ::unsetenv("TPF_NODE_ID");
  EXPECT_EQ(detail::resolve_comm_settings().reported("TPF_NODE_ID")->value,
            topo::local_host_key(std::nullopt));
}

// The defect this replaces: one rank per network namespace ran over /dev/shm at memory speed,
// through "links" capped far lower. Now they are two hosts, and a namespace with no network (not
// even loopback up) cannot reach the other: creation fails, bounded, on both ranks.
TEST(Hosts, RanksInDifferentNetworkNamespacesDoNotShareMemory) {
  testing::RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(3000);
  auto outcomes = testing::run_ranks_raw(
      2,
      [](const RankContext& ctx) {
        auto store = testing::connect_to_store(
            ctx, ctx.rank);  // before unshare: the store stays reachable through it
        if (ctx.rank == 1) {
          TPF_CHILD_CHECK(
              ::unshare(CLONE_NEWNET) == 0,
              std::string("unshare(CLONE_NEWNET) (needs root): ") + std::strerror(errno));
        }
        const Error e = testing::expect_error("a communicator across namespaces", [&] {
          Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        });
        TPF_CHILD_CHECK(e.code() != ErrorCode::internal, e.what());
      },
      options);
  testing::expect_all_ok(outcomes);
}

}  // namespace
}  // namespace tpf
