// The network between hosts (transport/ucx_network.h), on its own: wire-up through the store,
// messages of every size between every pair, and the failures a wait must name — a peer that
// dies, a peer that never sends, a message of the wrong size — with both protocols (tagged
// messages; put + signal into registered slots), the dying peer with tagged messages only (see
// that test). Runs over UCX's TCP transport on loopback (the transport CI has; RDMA lanes are the
// same ucp calls).
#include "transport/ucx_network.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "comm/heartbeat.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/error.h"
#include "tpf/store.h"
#include "transport/put_protocol.h"

namespace tpf {
namespace {

using testing::RankContext;
using transport::NetRequest;
using transport::UcxNetwork;
using transport::WaitContext;

// Every other rank is a peer on another host; `connect_first` as NetworkConfig's (unset: every
// peer connects while the network is made).
std::unique_ptr<UcxNetwork> connect_network(
    const RankContext& ctx, transport::NetProtocol protocol = transport::NetProtocol::automatic,
    std::optional<std::vector<int>> connect_first = std::nullopt,
    std::chrono::milliseconds setup_timeout = std::chrono::seconds(30),
    std::optional<std::vector<int>> put_peers = std::nullopt,
    std::function<std::optional<transport::FailureRecord>(int)> peer_lost = {}) {
  auto client = testing::connect_to_store(ctx, ctx.rank);
  transport::NetworkConfig config;
  config.rank = ctx.rank;
  config.size = ctx.size;
  for (int p = 0; p < ctx.size; ++p)
    if (p != ctx.rank) config.peers.push_back(p);
  config.connect_first = std::move(connect_first);
  config.put_peers = std::move(put_peers);
  config.peer_lost = std::move(peer_lost);
  config.store = std::make_shared<PrefixStore>("net-test", client);
  config.label = "network test";
  config.protocol = protocol;
  config.setup_timeout = setup_timeout;
  return std::make_unique<UcxNetwork>(config);
}

// No peer connected while the network is made: every pair connects on first use.
const std::vector<int> kNobodyFirst;

class ByProtocol : public ::testing::TestWithParam<transport::NetProtocol> {};

WaitContext within(std::chrono::milliseconds timeout) {
  return WaitContext::with_timeout(timeout, [] { return std::string("exchange"); });
}

// The byte rank `from` puts at offset i of its message to rank `to`.
unsigned char pattern(int from, int to, size_t i) {
  return static_cast<unsigned char>(from * 31 + to * 7 + i * 13 + (i >> 9));
}

// Every rank sends every other a message of each size across UCX's protocols (empty, short,
// eager, rendezvous) and checks every byte of theirs.
void exchange_with_every_peer(UcxNetwork& net, const RankContext& ctx) {
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{100}, size_t{8192}, size_t{1} << 20, size_t{9} << 20}) {
    std::vector<std::vector<unsigned char>> out(ctx.size), in(ctx.size);
    std::vector<NetRequest> requests;
    for (int p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      out[p].resize(bytes);
      in[p].assign(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) out[p][i] = pattern(ctx.rank, p, i);
      requests.push_back(net.recv(p, bytes, in[p].data(), bytes));
      requests.push_back(net.send(p, bytes, out[p].data(), bytes));
    }
    net.wait_all(requests, within(std::chrono::seconds(60)));
    for (int p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      for (size_t i = 0; i < bytes; ++i) {
        TPF_CHILD_CHECK(in[p][i] == pattern(p, ctx.rank, i), "byte " + std::to_string(i) + " of " +
                                                                 std::to_string(bytes) +
                                                                 " from rank " + std::to_string(p));
      }
    }
  }
}

TEST_P(ByProtocol, EveryPairExchangesMessagesOfEverySize) {
  auto outcomes = testing::run_ranks_raw(3, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam());
    exchange_with_every_peer(*net, ctx);
  });
  testing::expect_all_ok(outcomes);
}

// Put + signal gives slots only to the put peers: on a ring of four, ranks 0 and 2, and 1 and 3,
// give each other none and exchange tagged messages, while neighbours write into slots; rank 0
// also lists rank 2, which does not list it back, so that pair stays tagged too. The slots are a
// block per put peer, and every message of every size arrives whichever way its pair goes, over
// connections made first and on first use (the join carries slots only to a put peer).
TEST(UcxNetwork, SlotsGoToThePutPeersOnlyAndOtherPairsUseTaggedMessages) {
  for (const bool on_first_use : {false, true}) {
    SCOPED_TRACE(on_first_use ? "connected on first use" : "connected first");
    auto outcomes = testing::run_ranks_raw(4, [&](const RankContext& ctx) {
      const int next = (ctx.rank + 1) % 4, previous = (ctx.rank + 3) % 4;
      std::vector<int> put_peers{next, previous};
      if (ctx.rank == 0) put_peers.push_back(2);
      auto net = connect_network(ctx, transport::NetProtocol::put,
                                 on_first_use ? std::optional(kNobodyFirst) : std::nullopt,
                                 std::chrono::seconds(30), put_peers);
      TPF_CHILD_CHECK(
          net->put_slot_bytes() == put_peers.size() * transport::SlotLayout::block_bytes(),
          "slots of " + std::to_string(net->put_slot_bytes()) + " bytes");
      exchange_with_every_peer(*net, ctx);
      for (int p = 0; p < 4; ++p) {
        if (p == ctx.rank) continue;
        const bool neighbours = p == next || p == previous;
        TPF_CHILD_CHECK(net->uses_put(p) == neighbours,
                        "rank " + std::to_string(p) +
                            (neighbours ? " uses tagged messages" : " uses put + signal"));
      }
    });
    testing::expect_all_ok(outcomes);
  }
}

// The lanes are network lanes only: between processes of one machine UCX would otherwise pick
// shared memory (posix, sysv, cma), which would bypass the links of emulated hosts.
TEST(UcxNetwork, LanesAreNetworkTransportsOnly) {
  auto outcomes = testing::run_ranks_raw(2, [](const RankContext& ctx) {
    auto net = connect_network(ctx);
    const std::string lanes = net->describe_lanes(1 - ctx.rank);
    TPF_CHILD_CHECK(lanes.find("tcp/") != std::string::npos, lanes);
    for (const char* shared : {"posix/", "sysv/", "cma/", "self/"})
      TPF_CHILD_CHECK(lanes.find(shared) == std::string::npos, lanes);
  });
  testing::expect_all_ok(outcomes);
}

// Messages with different tags from one peer are told apart whatever order they arrive in, also
// when the one received second is larger than every slot the put protocol has (it waits in an
// unexpected message).
TEST_P(ByProtocol, TagsMatchWhateverTheOrderOfArrival) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam());
    const int peer = 1 - ctx.rank;
    for (size_t bytes : {size_t{4}, size_t{3} << 20}) {
      std::vector<unsigned char> first(bytes), second(bytes), got_first(bytes), got_second(bytes);
      for (size_t i = 0; i < bytes; ++i) {
        first[i] = pattern(0, 1, i);
        second[i] = pattern(1, 0, i);
      }
      std::vector<NetRequest> requests;
      if (ctx.rank == 0) {
        requests.push_back(net->send(peer, 2, second.data(), bytes));
        requests.push_back(net->send(peer, 1, first.data(), bytes));
      } else {
        requests.push_back(net->recv(peer, 1, got_first.data(), bytes));
        requests.push_back(net->recv(peer, 2, got_second.data(), bytes));
      }
      net->wait_all(requests, within(std::chrono::seconds(60)));
      if (ctx.rank == 1) {
        TPF_CHILD_CHECK(got_first == first && got_second == second,
                        "messages of " + std::to_string(bytes) + " bytes swapped or damaged");
      }
    }
  });
  testing::expect_all_ok(outcomes);
}

// The protocol each pair uses: put + signal only where asked for (automatic picks tagged
// messages here: UCX has TCP only).
TEST_P(ByProtocol, ThePairUsesTheProtocolAskedFor) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam());
    const bool put = GetParam() == transport::NetProtocol::put;
    TPF_CHILD_CHECK(net->uses_put(1 - ctx.rank) == put, "uses_put is not what was asked for");
  });
  testing::expect_all_ok(outcomes);
}

// Tagged messages only: over TCP, UCX 1.13 emulates puts with messages whose completion the
// target sends back on its endpoint to the initiator; if that endpoint has failed (the peer died)
// UCX aborts the target process ("unexpected error" in ucp_put_handler). docs/fabric.md says more.
// Over a connection made first the wait names the lost rank; on first use so does the transfer
// that connects to it, where UCX refuses the connection at once ("connecting to rank 1"), or the
// wait, where the connection fails later ("lost rank 1").
TEST(UcxNetwork, ADeadPeerIsNamedNotWaitedFor) {
  for (const bool on_first_use : {false, true}) {
    SCOPED_TRACE(on_first_use ? "connected on first use" : "connected first");
    auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
      auto net = connect_network(ctx, transport::NetProtocol::tag,
                                 on_first_use ? std::optional(kNobodyFirst) : std::nullopt);
      if (ctx.rank == 1) ::raise(SIGKILL);  // after publishing its address
      uint64_t value = 0;
      // A deadline far beyond the test's: only the peer's death can end this wait in time.
      const Error e = testing::expect_error("receive from a dead rank", [&] {
        std::vector<NetRequest> requests{net->recv(1, 5, &value, sizeof value)};
        net->wait_all(requests, within(std::chrono::minutes(10)));
      });
      TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died, e.what());
      const char* naming = on_first_use ? "rank 1 " : "lost rank 1";
      TPF_CHILD_CHECK(std::string(e.what()).find(naming) != std::string::npos, e.what());
    });
    EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
    EXPECT_EQ(outcomes[1].signal, SIGKILL);
  }
}

// UCX's error line for a connection that failed is taken in, not printed beside tpf's error
// (transport/ucx_network.h): rank 0 connects on first use to rank 1 after rank 1's process is
// gone, UCX fails the connection and says so at its error level, and the line is among
// recent_ucx_errors() (for the dumps) but not in rank 0's output (UCX prints its log on stdout).
// A user who set UCX_LOG_LEVEL sees it printed, and tpf keeps nothing.
TEST(UcxNetwork, UcxsErrorLinesAreKeptNotPrintedUnlessTheUserAskedForUcxsLog) {
  for (const bool user_asked : {false, true}) {
    SCOPED_TRACE(user_asked ? "UCX_LOG_LEVEL set" : "UCX_LOG_LEVEL unset");
    testing::SharedBlock shared;  // [0]: rank 1's pid
    auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
      if (user_asked) {
        ::setenv("UCX_LOG_LEVEL", "warn", 1);  // UCX's default: it prints as it would anyway
      } else {
        ::unsetenv("UCX_LOG_LEVEL");
      }
      auto net = connect_network(ctx, transport::NetProtocol::tag, kNobodyFirst);
      if (ctx.rank == 1) {
        shared.counter(0).store(::getpid());
        ::raise(SIGKILL);
      }
      TPF_CHILD_CHECK(testing::wait_until(
                          [&] {
                            const auto pid = static_cast<pid_t>(shared.counter(0).load());
                            const char state = pid == 0 ? 'R' : testing::process_state(pid);
                            return state == 0 || state == 'Z';  // exited: its sockets closed
                          },
                          std::chrono::seconds(30)),
                      "rank 1 did not exit");
      const std::vector<std::string> kept_before = transport::recent_ucx_errors();
      ::testing::internal::CaptureStdout();
      uint64_t value = 0;
      const Error e = testing::expect_error("receive from a dead rank", [&] {
        std::vector<NetRequest> requests{net->recv(1, 5, &value, sizeof value)};
        net->wait_all(requests, within(std::chrono::minutes(10)));
      });
      const std::string printed = ::testing::internal::GetCapturedStdout();
      TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died, e.what());
      const std::vector<std::string> kept = transport::recent_ucx_errors();
      const bool ucx_printed = printed.find("UCX  ERROR") != std::string::npos;
      TPF_CHILD_CHECK(ucx_printed == user_asked, "printed: " + printed);
      TPF_CHILD_CHECK((kept == kept_before) == user_asked,
                      "kept: " + (kept.empty() ? std::string("nothing") : kept.back()));
    });
    EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
    EXPECT_EQ(outcomes[1].signal, SIGKILL);
  }
}

// Ranks that fail at the same moment (a mismatch fails every rank) each tell the others and wait
// for their acknowledgements before closing: each acknowledges the notices that arrive while it
// waits, so none waits out the bound (it did, 2 s each, when only a collective's wait
// acknowledged).
TEST(UcxNetwork, RanksThatFailTogetherAcknowledgeEachOthersNotices) {
  auto outcomes = testing::run_ranks_raw(3, [&](const RankContext& ctx) {
    auto net = connect_network(ctx);
    net->notify_failure({ErrorCode::mismatch, "rank " + std::to_string(ctx.rank) + " failed"});
    TPF_CHILD_CHECK(net->await_notice_acks(),
                    "the bound ran out before every peer acknowledged this rank's notice");
  });
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.ok()) << outcome.describe();
}

// A rank that fails does not wait for the acknowledgement of a peer known lost, which cannot give
// one: rank 2 stops once connected (as a stopped process does, it never progresses); ranks 0 and
// 1 notify a failure, and only then learn that rank 2 is lost (a heartbeat names it after the
// notice went out), and find every acknowledgement they still wait for in. Each waited the bound
// (2 s) for rank 2 and returned false, as every survivor of a stopped rank did as it failed and
// as it left, before 2026-12-06.
TEST(UcxNetwork, ARankThatFailsDoesNotAwaitAPeerKnownLost) {
  testing::SharedBlock shared;  // [0]: the survivors done; [1]: rank 2's pid
  auto outcomes = testing::run_ranks_raw(3, [&](const RankContext& ctx) {
    std::atomic<bool> rank_2_lost{false};
    auto net = connect_network(ctx, transport::NetProtocol::automatic, std::nullopt,
                               std::chrono::seconds(30), std::nullopt,
                               [&](int rank) -> std::optional<transport::FailureRecord> {
                                 if (rank != 2 || !rank_2_lost.load()) return std::nullopt;
                                 return transport::FailureRecord{ErrorCode::timeout, "stopped"};
                               });
    if (ctx.rank == 2) {
      shared.counter(1).store(::getpid());
      ::raise(SIGSTOP);
      return;  // not reached: killed while stopped
    }
    TPF_CHILD_CHECK(testing::wait_until([&] { return shared.counter(1).load() != 0; },
                                        std::chrono::seconds(60)),
                    "rank 2 never stopped");
    net->notify_failure({ErrorCode::timeout, "rank " + std::to_string(ctx.rank) + " failed"});
    rank_2_lost.store(true);
    TPF_CHILD_CHECK(net->await_notice_acks(),
                    "the bound ran out waiting for an acknowledgement (rank 2's?)");
    if (shared.counter(0).fetch_add(1) + 1 == 2)
      ::kill(static_cast<pid_t>(shared.counter(1).load()), SIGKILL);
  });
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
  EXPECT_TRUE(outcomes[1].ok()) << outcomes[1].describe();
  EXPECT_EQ(outcomes[2].signal, SIGKILL) << outcomes[2].describe();
}

TEST_P(ByProtocol, APeerThatNeverSendsIsNamedAtTheDeadline) {
  testing::SharedBlock shared;
  auto outcomes = testing::run_ranks_raw(3, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam());
    if (ctx.rank == 0) {
      uint64_t from1 = 0, from2 = 0;
      std::vector<NetRequest> requests{net->recv(1, 9, &from1, sizeof from1),
                                       net->recv(2, 9, &from2, sizeof from2)};
      const uint64_t value = 7;
      NetRequest to2 = net->send(2, 3, &value, sizeof value);  // rank 2 waits for this first
      net->wait_all(std::span<NetRequest>(&to2, 1), within(std::chrono::seconds(30)));
      const Error e = testing::expect_error("receive from a silent rank", [&] {
        net->wait_all(requests, within(std::chrono::milliseconds(300)));
      });
      TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
      TPF_CHILD_CHECK(std::string(e.what()).find("waiting for rank 1 ") != std::string::npos,
                      e.what());
      shared.counter(0).store(1);
    } else {
      if (ctx.rank == 2) {
        uint64_t value = 0, mine = 2;
        NetRequest from0 = net->recv(0, 3, &value, sizeof value);
        net->wait_all(std::span<NetRequest>(&from0, 1), within(std::chrono::seconds(30)));
        NetRequest to0 = net->send(0, 9, &mine, sizeof mine);
        net->wait_all(std::span<NetRequest>(&to0, 1), within(std::chrono::seconds(30)));
      }
      // Stay connected (silent) until rank 0 has seen its timeout.
      TPF_CHILD_CHECK(testing::wait_until([&] { return shared.counter(0).load() == 1; },
                                          std::chrono::seconds(30)),
                      "rank 0 never finished");
    }
  });
  testing::expect_all_ok(outcomes);
}

// Connections on first use: none while the network is made; a transfer connects its pair, the
// peer connecting back on the join it receives; messages of every size then cross as over a
// connection made first (put + signal too, its slots handed back once both ends are connected).
TEST_P(ByProtocol, PairsConnectOnFirstUse) {
  auto outcomes = testing::run_ranks_raw(3, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam(), kNobodyFirst);
    TPF_CHILD_CHECK(net->connected_peers().empty(), "connected before any transfer");
    if (ctx.rank == 2) return;  // no transfer: nobody connects to it
    const int peer = 1 - ctx.rank;
    for (size_t bytes : {size_t{0}, size_t{100}, size_t{1} << 20, size_t{9} << 20}) {
      std::vector<unsigned char> out(bytes), in(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) out[i] = pattern(ctx.rank, peer, i);
      std::vector<NetRequest> requests{net->recv(peer, bytes, in.data(), bytes),
                                       net->send(peer, bytes, out.data(), bytes)};
      net->wait_all(requests, within(std::chrono::seconds(60)));
      for (size_t i = 0; i < bytes; ++i) {
        TPF_CHILD_CHECK(in[i] == pattern(peer, ctx.rank, i),
                        "byte " + std::to_string(i) + " of " + std::to_string(bytes));
      }
    }
    TPF_CHILD_CHECK(net->connected_peers() == std::vector<int>{peer},
                    "connected to more than the peer it exchanged with");
  });
  testing::expect_all_ok(outcomes);
}

// Progresses `net` (as any wait does) until its only connection is the one back to `peer`, which
// connected to it on first use; false if that takes a minute.
bool connects_back_to(UcxNetwork& net, int peer) {
  return testing::wait_until(
      [&] {
        net.advance({}, within(std::chrono::seconds(1)));
        return net.connected_peers() == std::vector<int>{peer};
      },
      std::chrono::seconds(60));
}

// A rank that never makes a transfer with a peer that connected to it still connects back, on the
// join (taken by any round of progress): its failure notice then reaches that peer, which fails at
// once naming the cause (without the connection back, at its deadline: this rank stays alive, so
// no connection fails).
TEST(UcxNetwork, APeerConnectedOnFirstUseHearsTheOtherEndsFailure) {
  testing::SharedBlock shared;
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, transport::NetProtocol::automatic, kNobodyFirst);
    if (ctx.rank == 0) {
      uint64_t value = 0;
      std::vector<NetRequest> requests{net->recv(1, 5, &value, sizeof value)};
      const Error e = testing::expect_error("a receive from a rank that fails", [&] {
        net->wait_all(requests, within(std::chrono::seconds(60)));
      });
      TPF_CHILD_CHECK(std::string(e.what()).find("rank 1 failed its test") != std::string::npos,
                      e.what());
      shared.counter(0).store(1);
      return;
    }
    TPF_CHILD_CHECK(connects_back_to(*net, 0), "never connected back to rank 0");
    net->notify_failure({ErrorCode::internal, "rank 1 failed its test"});
    TPF_CHILD_CHECK(testing::wait_until([&] { return shared.counter(0).load() == 1; },
                                        std::chrono::seconds(60)),
                    "rank 0 never heard of the failure");
  });
  testing::expect_all_ok(outcomes);
}

// Likewise a rank that leaves (destroys its communicator) after a peer connected to it on first use
// tells that peer, whose receive from it then fails at once naming it, not at its deadline or as
// a lost connection.
TEST(UcxNetwork, APeerConnectedOnFirstUseHearsTheOtherEndLeave) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, transport::NetProtocol::automatic, kNobodyFirst);
    if (ctx.rank == 0) {
      uint64_t value = 0;
      std::vector<NetRequest> requests{net->recv(1, 5, &value, sizeof value)};
      const Error e = testing::expect_error("a receive from a rank that leaves", [&] {
        net->wait_all(requests, within(std::chrono::seconds(60)));
      });
      TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
      TPF_CHILD_CHECK(
          std::string(e.what()).find("rank 1 destroyed the communicator") != std::string::npos,
          e.what());
      return;
    }
    TPF_CHILD_CHECK(connects_back_to(*net, 0), "never connected back to rank 0");
    net->leave(std::nullopt);
  });
  testing::expect_all_ok(outcomes);
}

// A peer that never made its network (it never published an address) is named by the first
// transfer with it, within the setup timeout.
TEST(UcxNetwork, APeerThatNeverMadeItsNetworkIsNamedByTheFirstTransfer) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    if (ctx.rank == 1) return;
    auto net = connect_network(ctx, transport::NetProtocol::automatic, kNobodyFirst,
                               std::chrono::milliseconds(300));
    uint64_t value = 0;
    const Error e = testing::expect_error("send to a rank without a network",
                                          [&] { net->send(1, 5, &value, sizeof value); });
    TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
    TPF_CHILD_CHECK(std::string(e.what()).find("connecting to rank 1 over the network on first "
                                               "use") != std::string::npos,
                    e.what());
  });
  testing::expect_all_ok(outcomes);
}

// A rank's network with a heartbeat between two hosts of one rank whose period (two minutes)
// passes no beat in a test; `failed` says whether the heartbeat failed.
struct NetworkWithHeartbeat {
  explicit NetworkWithHeartbeat(const RankContext& ctx)
      : net(connect_network(ctx)),
        heartbeat({ctx.rank,
                   topo::HostMap({"a", "b"}),
                   "heartbeat test",
                   std::chrono::minutes(10),
                   nullptr,
                   {}},
                  *net, [this](std::exception_ptr) { failed = true; }) {}
  std::unique_ptr<UcxNetwork> net;
  std::atomic<bool> failed{false};
  detail::Heartbeat heartbeat;
};

// A sender that goes on (a small broadcast's root, a reduce's sender) leaves to UCX what it has
// not sent yet: sends queued behind a full socket, the tail of a message the socket took in part.
// Its heartbeat thread pushes that on every 20 ms (UcxNetwork::push_unsent), so the receiver gets
// all of it while the sender's own thread stays away from the network (here: until the receiver
// says it has everything). 32 MiB in 8 KiB messages is more than the sockets hold. Without the
// push only the heartbeat's beat would progress the sender, once a period (two minutes here), and
// the receiver would fail at its deadline.
TEST(UcxNetwork, SendsWhoseSenderWentOnArePushedOnByItsHeartbeat) {
  testing::SharedBlock shared;
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    NetworkWithHeartbeat rank(ctx);
    UcxNetwork* net = rank.net.get();
    constexpr size_t kMessages = 4096, kBytes = 8192;
    std::vector<unsigned char> data(kMessages * kBytes);
    std::vector<NetRequest> requests;
    if (ctx.rank == 0) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = pattern(0, 1, i);
      for (size_t m = 0; m < kMessages; ++m)
        requests.push_back(net->send(1, m, data.data() + m * kBytes, kBytes));
      shared.counter(0).store(1);  // sent: now away from the network
      TPF_CHILD_CHECK(testing::wait_until([&] { return shared.counter(1).load() == 1; },
                                          std::chrono::seconds(60)),
                      "rank 1 did not get the messages");
      net->wait_all(requests, within(std::chrono::seconds(30)));
    } else {
      TPF_CHILD_CHECK(testing::wait_until([&] { return shared.counter(0).load() == 1; },
                                          std::chrono::seconds(60)),
                      "rank 0 did not send");
      for (size_t m = 0; m < kMessages; ++m)
        requests.push_back(net->recv(0, m, data.data() + m * kBytes, kBytes));
      net->wait_all(requests, within(std::chrono::seconds(20)));
      for (size_t i = 0; i < data.size(); ++i)
        TPF_CHILD_CHECK(data[i] == pattern(0, 1, i), "byte " + std::to_string(i) + " differs");
      shared.counter(1).store(1);
    }
    TPF_CHILD_CHECK(!rank.failed, "the heartbeat failed");
  });
  testing::expect_all_ok(outcomes);
}

// With nothing to push and no beat due (a period of two minutes here), the heartbeat sleeps on
// the network instead of taking a round every 20 ms. Once the exchange's sends are pushed, a
// second of idleness takes only the rounds that messages wake it for: its first beat's arrival,
// the peer's last rounds (at most a few; 8 allowed). Before 2026-12-05 it took about 50, and 300
// idle communicators of 8 ranks took both cores of a 2-core machine. A loaded machine can only
// give it fewer.
TEST(UcxNetwork, AnIdleHeartbeatTakesNoRoundsOfProgress) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    NetworkWithHeartbeat rank(ctx);
    UcxNetwork* net = rank.net.get();
    uint32_t mine = 7, theirs = 0;
    std::vector<NetRequest> exchange{net->recv(1 - ctx.rank, 1, &theirs, sizeof theirs),
                                     net->send(1 - ctx.rank, 1, &mine, sizeof mine)};
    net->wait_all(exchange, within(std::chrono::seconds(30)));
    TPF_CHILD_CHECK(theirs == 7, "the exchange");
    TPF_CHILD_CHECK(
        testing::wait_until([&] { return !net->has_unsent(); }, std::chrono::seconds(30)),
        "the exchange's sends were never pushed");
    const uint64_t before = net->rounds();
    std::this_thread::sleep_for(std::chrono::seconds(1));  // idle: what it costs
    const uint64_t taken = net->rounds() - before;
    TPF_CHILD_CHECK(taken <= 8, std::to_string(taken) + " rounds in a second of idleness");
    TPF_CHILD_CHECK(!rank.failed, "the heartbeat failed");
  });
  testing::expect_all_ok(outcomes);
}

TEST_P(ByProtocol, AMessageOfTheWrongSizeIsAMismatch) {
  auto outcomes = testing::run_ranks_raw(2, [&](const RankContext& ctx) {
    auto net = connect_network(ctx, GetParam());
    if (ctx.rank == 0) {
      const uint64_t values[2] = {1, 2};
      NetRequest small = net->send(1, 4, values, sizeof values[0]);
      net->wait_all(std::span<NetRequest>(&small, 1), within(std::chrono::seconds(30)));
      NetRequest large = net->send(1, 6, values, sizeof values);
      // Rank 1 stops reading after the truncation: this send may fail or complete.
      try {
        net->wait_all(std::span<NetRequest>(&large, 1), within(std::chrono::seconds(30)));
      } catch (const Error&) {
      }
    } else {
      uint64_t got[2] = {0, 0};
      // recv() reports it if the message is here already, wait_all() otherwise.
      const Error shorter = testing::expect_error("a shorter message", [&] {
        NetRequest short_message = net->recv(0, 4, got, sizeof got);
        net->wait_all(std::span<NetRequest>(&short_message, 1), within(std::chrono::seconds(30)));
      });
      TPF_CHILD_CHECK(shorter.code() == ErrorCode::mismatch, shorter.what());
      TPF_CHILD_CHECK(
          std::string(shorter.what()).find("sent 8 bytes where 16") != std::string::npos,
          shorter.what());
      const Error longer = testing::expect_error("a longer message", [&] {
        NetRequest long_message = net->recv(0, 6, got, sizeof got[0]);
        net->wait_all(std::span<NetRequest>(&long_message, 1), within(std::chrono::seconds(30)));
      });
      TPF_CHILD_CHECK(longer.code() == ErrorCode::mismatch, longer.what());
    }
  });
  testing::expect_all_ok(outcomes);
}

INSTANTIATE_TEST_SUITE_P(UcxNetwork, ByProtocol,
                         ::testing::Values(transport::NetProtocol::tag, transport::NetProtocol::put,
                                           transport::NetProtocol::automatic),
                         [](const auto& info) {
                           return std::string(transport::net_protocol_name(info.param));
                         });

}  // namespace
}  // namespace tpf
