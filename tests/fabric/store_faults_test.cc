// Tests of the TCP store under faults: ranks that die (their waiters hear of it at once, naming the
// rank), a store host that dies, and strangers who try to exhaust the server's memory, connections,
// time or descriptors. Counts come from TcpStoreServer::stats(), never from RSS or the clock.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "support/multiproc.h"
#include "support/raw_store_client.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;
using testing::wait_until;
namespace proto = bootstrap::store_protocol;

constexpr char kSecret[] = "faults-test-secret";

std::unique_ptr<TcpStoreClient> rank_client(const TcpStoreServer& server, int rank) {
  return std::make_unique<TcpStoreClient>("127.0.0.1", server.port(), kSecret, 5s, rank);
}

// Runs a store call and keeps the error it ends with.
struct GetOutcome {
  bool threw = false;
  ErrorCode code = ErrorCode::internal;
  std::string message;
};
template <class Call>
GetOutcome outcome_of(Call&& call) {
  GetOutcome out;
  try {
    call();
  } catch (const Error& e) {
    out = {true, e.code(), e.what()};
  }
  return out;
}
GetOutcome try_get(Store& store, const std::string& key, std::chrono::milliseconds timeout) {
  return outcome_of([&] { store.get(key, timeout); });
}

// A store of the user's own that overrides only what it must: Store's defaults for the rest.
struct PlainStore : Store {
  void set(const std::string&, const std::string&) override {}
  std::string get(const std::string&, std::chrono::milliseconds) override { return ""; }
  int64_t add(const std::string&, int64_t) override { return 0; }
  bool check(const std::string&) override { return false; }
};

// Job rank `rank` (process `pid`) connects and vanishes without a goodbye, as a killed process
// does.
void connect_and_vanish(const TcpStoreServer& server, int rank, int64_t pid) {
  RawClient vanishing(server.port());
  vanishing.send_bytes(RawClient::hello(kSecret, rank, pid));
  ASSERT_EQ(vanishing.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
}

TEST(StoreDeadRank, RankThatVanishesWithoutGoodbyeFailsWaitersWithPeerDied) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 1);
  waiter->set("present", "v");
  {
    // A rank that closes its client says goodbye: it did not die.
    auto polite = rank_client(server, 3);
    polite->set("x", "1");
  }
  ASSERT_TRUE(wait_until([&] { return server.stats().connections == 1; }, 10s));
  EXPECT_EQ(server.stats().dead_ranks, 0u);
  EXPECT_EQ(try_get(*waiter, "never", 20ms).code, ErrorCode::timeout);

  GetOutcome parked;
  std::thread t([&] { parked = try_get(*waiter, "never", 20s); });
  connect_and_vanish(server, 2, 4242);
  t.join();
  EXPECT_TRUE(parked.threw);
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  EXPECT_NE(parked.message.find("job rank 2 (pid 4242) died"), std::string::npos) << parked.message;
  EXPECT_NE(parked.message.find("'never'"), std::string::npos) << parked.message;

  // Later waits fail at once, on any connection; keys that exist are still served.
  auto late = rank_client(server, 0);
  const GetOutcome later = try_get(*late, "also_never", 20s);
  EXPECT_EQ(later.code, ErrorCode::peer_died) << later.message;
  EXPECT_NE(later.message.find("job rank 2"), std::string::npos) << later.message;
  EXPECT_EQ(waiter->get("present", 1s), "v");
  EXPECT_EQ(server.stats().dead_ranks, 1u);
}

// A get_many waiting for one of its keys hears of a dead rank as a get does.
TEST(StoreDeadRank, AGetManyWaitingForAKeyFailsWithPeerDied) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 1);
  waiter->set("present", "v");
  GetOutcome parked;
  std::thread t([&] { parked = outcome_of([&] { waiter->get_many({"present", "never"}, 20s); }); });
  connect_and_vanish(server, 2, 4242);
  t.join();
  EXPECT_TRUE(parked.threw);
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  EXPECT_NE(parked.message.find("job rank 2 (pid 4242) died"), std::string::npos) << parked.message;
  EXPECT_EQ(waiter->get_many({"present"}, 1s), std::vector<std::string>{"v"});
}

// A get_many_from waits only on the ranks it names: another rank's death leaves it waiting (it
// gets its value once set), while one of theirs ends it, naming that rank first and only theirs.
TEST(StoreDeadRank, AWaitOnSomeRanksOutlivesTheDeathsOfOthers) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 0);
  auto setter = rank_client(server, 1);
  std::vector<std::string> values;
  GetOutcome parked;
  std::thread t([&] {
    parked = outcome_of([&] { values = waiter->get_many_from({1, 0}, {"k"}, 60s); });
  });
  ASSERT_TRUE(wait_until([&] { return server.stats().waiting == 1; }, 10s));
  connect_and_vanish(server, 2, 4242);
  ASSERT_TRUE(wait_until([&] { return server.stats().dead_ranks == 1; }, 10s));
  EXPECT_EQ(server.stats().waiting, 1u);  // still waiting: rank 2 is none of its ranks
  setter->set("k", "v");
  t.join();
  EXPECT_FALSE(parked.threw) << parked.message;
  EXPECT_EQ(values, std::vector<std::string>{"v"});
  // Any rank's wait (get, get_many, an empty list) ends at once.
  EXPECT_EQ(try_get(*waiter, "never", 60s).code, ErrorCode::peer_died);
  EXPECT_EQ(outcome_of([&] { waiter->get_many_from({}, {"never"}, 60s); }).code,
            ErrorCode::peer_died);
  // A wait on ranks 5 and 7 names its own dead rank, not rank 2 (dead first).
  connect_and_vanish(server, 7, 4343);
  connect_and_vanish(server, 9, 4444);
  ASSERT_TRUE(wait_until([&] { return server.stats().dead_ranks == 3; }, 10s));
  const GetOutcome theirs = outcome_of([&] { waiter->get_many_from({5, 7}, {"never"}, 60s); });
  EXPECT_EQ(theirs.code, ErrorCode::peer_died) << theirs.message;
  EXPECT_EQ(theirs.message.find("job rank 7 (pid 4343) died"), 0u) << theirs.message;
  EXPECT_EQ(theirs.message.find("also dead"), std::string::npos) << theirs.message;
  // Bad input: a negative rank.
  const GetOutcome negative = outcome_of([&] { waiter->get_many_from({-1}, {"k"}, 1s); });
  EXPECT_EQ(negative.code, ErrorCode::invalid_argument) << negative.message;
}

TEST(StoreDeadRank, ClientsThatAreNotRanksNeverCountAsDead) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = rank_client(server, -1);
  {
    RawClient tool(server.port());  // a tool, not a rank, that disconnects abruptly
    tool.send_bytes(RawClient::hello(kSecret));
    ASSERT_EQ(tool.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
  }
  ASSERT_TRUE(wait_until([&] { return server.stats().connections == 1; }, 10s));
  EXPECT_EQ(server.stats().dead_ranks, 0u);
  EXPECT_EQ(try_get(*client, "never", 20ms).code, ErrorCode::timeout);
}

TEST(StoreDeadRank, StoreHostDeathIsPeerDiedNamingTheRank) {
  StoreServerLimits limits;
  limits.host_rank = 0;
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret, limits);
  auto client = rank_client(*server, 1);
  GetOutcome parked;
  std::thread t([&] { parked = try_get(*client, "never", 20s); });
  server.reset();  // the host rank's process goes away with its store
  t.join();
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  const std::string host = "job rank 0 (pid " + std::to_string(::getpid()) + "), which serves";
  EXPECT_NE(parked.message.find(host), std::string::npos) << parked.message;
  // Later calls say the same at once instead of retrying to connect.
  try {
    client->set("k", "v");
    FAIL() << "expected peer_died";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::peer_died) << e.what();
    EXPECT_NE(std::string(e.what()).find("job rank 0"), std::string::npos) << e.what();
  }
}

// A rank found lost (stopped, or its host cut off) keeps its connection open, so the server
// cannot see it go: the rank that found it says so, and every wait for a missing key ends as for
// a death, naming the rank, who found it and how.
TEST(StoreLostRank, AReportFailsTheWaitersNamingTheRankAndWhoFoundIt) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 1);
  auto finder = rank_client(server, 0);
  waiter->set("present", "v");
  GetOutcome parked;
  std::thread t([&] { parked = outcome_of([&] { waiter->get_many({"present", "never"}, 60s); }); });
  EXPECT_TRUE(finder->report_lost(3, "no heartbeat for 3.0 s", 5s));
  t.join();
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  const std::string naming = "job rank 3 was found lost by job rank 0: no heartbeat for 3.0 s";
  EXPECT_NE(parked.message.find(naming), std::string::npos) << parked.message;
  // Later waits fail at once; keys that exist are still served.
  const GetOutcome later = try_get(*finder, "also_never", 60s);
  EXPECT_EQ(later.code, ErrorCode::peer_died) << later.message;
  EXPECT_NE(later.message.find(naming), std::string::npos) << later.message;
  EXPECT_EQ(waiter->get("present", 1s), "v");
  EXPECT_EQ(server.stats().dead_ranks, 1u);
}

// The client serializes its calls on one connection, and the rank that finds a loss may be the one
// waiting in the store for the lost rank (a communicator being made): the report must not wait
// behind that get. Here one client's get waits, and the same client's report ends it.
TEST(StoreLostRank, AReportIsNotHeldBackByTheClientsOwnWaitingGet) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = rank_client(server, 0);
  GetOutcome parked;
  std::thread t([&] { parked = try_get(*client, "never", 60s); });
  ASSERT_TRUE(wait_until([&] { return server.stats().waiting == 1; }, 10s));
  EXPECT_TRUE(client->report_lost(2, "stopped", 5s));
  t.join();
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  EXPECT_NE(parked.message.find("job rank 2 was found lost by job rank 0: stopped"),
            std::string::npos)
      << parked.message;
  // The report's own connection was no rank's: closing it killed nobody.
  ASSERT_TRUE(wait_until([&] { return server.stats().connections == 1; }, 10s));
  EXPECT_EQ(server.stats().dead_ranks, 1u);
}

// A lost rank whose connection is open is named with its pid; killed later (its connection closes
// without a goodbye) it is not counted again, and the loss stays the first cause named.
TEST(StoreLostRank, ARankReportedLostThenKilledIsNamedOnceWithItsPid) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto lost = std::make_unique<RawClient>(server.port());
  lost->send_bytes(RawClient::hello(kSecret, 2, 4242));
  ASSERT_EQ(lost->read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
  auto client = rank_client(server, 0);
  EXPECT_TRUE(client->report_lost(2, "stopped", 5s));
  EXPECT_TRUE(client->report_lost(2, "stopped again", 5s));  // another finder: the first stays
  lost.reset();                                              // killed at last
  ASSERT_TRUE(wait_until([&] { return server.stats().connections == 1; }, 10s));
  EXPECT_EQ(server.stats().dead_ranks, 1u);
  const GetOutcome later = try_get(*client, "never", 60s);
  EXPECT_EQ(later.code, ErrorCode::peer_died) << later.message;
  EXPECT_NE(later.message.find("job rank 2 (pid 4242) was found lost by job rank 0: stopped ("),
            std::string::npos)
      << later.message;
  EXPECT_EQ(later.message.find("also dead"), std::string::npos) << later.message;
}

// Bad reports: a negative rank is refused by the client; a malformed frame by the server, which
// closes that connection and notes nobody.
TEST(StoreLostRank, MalformedReportsAreRefusedNamingWhatWasWrong) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = rank_client(server, 0);
  const GetOutcome negative = outcome_of([&] { client->report_lost(-2, "x", 5s); });
  EXPECT_EQ(negative.code, ErrorCode::invalid_argument) << negative.message;
  EXPECT_NE(negative.message.find("job rank -2 is negative"), std::string::npos)
      << negative.message;
  RawClient raw(server.port());
  raw.send_bytes(RawClient::hello(kSecret));
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Op::lost));
  proto::put_u32(p, 3);  // no finder, no reason
  raw.send_bytes(RawClient::frame(p));
  const std::string reply = raw.read_reply().value_or("");
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(reply.at(0), static_cast<char>(proto::Status::error));
  EXPECT_NE(reply.find("malformed lost report"), std::string::npos) << reply;
  EXPECT_EQ(server.stats().dead_ranks, 0u);
  EXPECT_EQ(try_get(*client, "never", 20ms).code, ErrorCode::timeout);
}

// A store of the user's own cannot tell its waiters unless it says how; a PrefixStore passes the
// report to the store it views (ranks are the job's, not prefixed).
TEST(StoreLostRank, OnlyStoresThatCanTellTheirWaitersTakeAReport) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto inner = std::shared_ptr<Store>(rank_client(server, 0));
  PrefixStore scoped("comm/0", inner);
  EXPECT_TRUE(scoped.report_lost(1, "stopped", 5s));
  EXPECT_EQ(try_get(*inner, "never", 60s).code, ErrorCode::peer_died);
  PlainStore plain;
  EXPECT_FALSE(plain.report_lost(1, "stopped", 5s));
}

// Which ranks the store holds dead (what Communicator::shrink leaves out): those whose connection
// closed without a goodbye and those reported lost, each once, ascending; through a PrefixStore
// too (ranks are the job's). A store of the user's own knows of none.
TEST(StoreDeadRank, DeadRanksListsTheDeadAndTheLostOnceEach) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = std::shared_ptr<Store>(rank_client(server, 0));
  EXPECT_TRUE(client->dead_ranks().empty());
  {
    auto polite = rank_client(server, 1);  // says goodbye: not dead
  }
  connect_and_vanish(server, 5, 4242);
  ASSERT_TRUE(wait_until([&] { return server.stats().dead_ranks == 1; }, 10s));
  EXPECT_EQ(client->dead_ranks(), std::vector<int>({5}));
  EXPECT_TRUE(client->report_lost(2, "stopped", 5s));
  EXPECT_TRUE(client->report_lost(5, "also lost", 5s));  // noted already
  EXPECT_EQ(client->dead_ranks(), std::vector<int>({2, 5}));
  EXPECT_EQ(PrefixStore("comm/0", client).dead_ranks(), std::vector<int>({2, 5}));
  PlainStore plain;
  EXPECT_TRUE(plain.dead_ranks().empty());
  // A malformed question is refused, and that connection closed.
  RawClient raw(server.port());
  raw.send_bytes(RawClient::hello(kSecret));
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Op::dead));
  proto::put_u32(p, 7);  // dead takes no fields
  raw.send_bytes(RawClient::frame(p));
  const std::string reply = raw.read_reply().value_or("");
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(reply.at(0), static_cast<char>(proto::Status::error));
  EXPECT_NE(reply.find("malformed dead request"), std::string::npos) << reply;
}

// What a server's lost-rank handler (TcpStoreServer::on_rank_lost) was told, in order.
class LostRanksTold {
 public:
  struct Told {
    int rank, found_by;
    std::string reason;
  };
  explicit LostRanksTold(TcpStoreServer& server) {
    server.on_rank_lost([this](int rank, int found_by, const std::string& reason) {
      std::lock_guard lock(mu_);
      told_.push_back({rank, found_by, reason});
    });
  }
  std::vector<Told> told() {
    std::lock_guard lock(mu_);
    return told_;
  }

 private:
  std::mutex mu_;
  std::vector<Told> told_;
};

// The server tells its owner of each rank first reported lost (tpf run --keep-going ends it): not
// of a rank reported again, nor of one whose connection had closed (dead already).
TEST(StoreDeadRank, TheServerTellsOfEachRankFirstReportedLost) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  LostRanksTold lost(server);
  auto finder = rank_client(server, 1);
  connect_and_vanish(server, 5, 4242);
  ASSERT_TRUE(wait_until([&] { return server.stats().dead_ranks == 1; }, 10s));
  EXPECT_TRUE(finder->report_lost(3, "no heartbeat for 3.0 s", 5s));
  EXPECT_TRUE(finder->report_lost(3, "no heartbeat again", 5s));
  EXPECT_TRUE(finder->report_lost(5, "lost after it died", 5s));
  // Each report was answered after the handler ran.
  const std::vector<LostRanksTold::Told> told = lost.told();
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].rank, 3);
  EXPECT_EQ(told[0].found_by, 1);
  EXPECT_EQ(told[0].reason, "no heartbeat for 3.0 s");
}

// A beat (Op::beat) with its silence limit in ms, as Store::keep_alive's thread sends it.
std::string beat_frame(int64_t limit_ms) {
  std::string p;
  proto::put_u8(p, static_cast<uint8_t>(proto::Op::beat));
  proto::put_i64(p, limit_ms);
  return RawClient::frame(p);
}

// A rank that beat and then fell silent (its process stopped: its connection stays open, so the
// server cannot see it go) is taken for lost once its silence limit has passed: every wait ends
// as for a death, naming it and why, and the server's lost-rank handler hears of it (found by no
// rank: -1).
TEST(StoreSilence, ARankWhoseBeatsStopIsTakenForLostAndItsWaitersEnd) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  LostRanksTold lost(server);
  auto waiter = rank_client(server, 1);
  RawClient silent(server.port());
  silent.send_bytes(RawClient::hello(kSecret, 2, 4242));
  ASSERT_TRUE(silent.read_reply().has_value());
  silent.send_bytes(beat_frame(200));
  const GetOutcome parked = try_get(*waiter, "never", 60s);
  EXPECT_EQ(parked.code, ErrorCode::peer_died) << parked.message;
  const std::string reason =
      "the store heard no beat from it for 0.2 s while it made a communicator (a stopped "
      "process, or its host cut off)";
  EXPECT_EQ(parked.message.find("job rank 2 (pid 4242) was found lost: " + reason), 0u)
      << parked.message;
  EXPECT_EQ(waiter->dead_ranks(), std::vector<int>({2}));
  EXPECT_EQ(server.stats().connections, 2u);  // the silent one is still open: no death
  const std::vector<LostRanksTold::Told> told = lost.told();
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].rank, 2);
  EXPECT_EQ(told[0].found_by, -1);
  EXPECT_EQ(told[0].reason, reason);
}

// A beat of limit 0 ends the judging (the last token is gone: the rank is done making its
// communicator); a client that is no rank is never judged; a malformed beat is refused.
TEST(StoreSilence, AZeroLimitEndsTheJudgingAndNoRankIsEverJudged) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 1);
  RawClient done(server.port());
  done.send_bytes(RawClient::hello(kSecret, 2, 4242));
  ASSERT_TRUE(done.read_reply().has_value());
  done.send_bytes(beat_frame(200) + beat_frame(0));
  RawClient tool(server.port());
  tool.send_bytes(RawClient::hello(kSecret));
  ASSERT_TRUE(tool.read_reply().has_value());
  tool.send_bytes(beat_frame(200));
  // Five times the limit: either would have been taken for lost by now.
  EXPECT_EQ(try_get(*waiter, "never", 1s).code, ErrorCode::timeout);
  EXPECT_EQ(server.stats().dead_ranks, 0u);
  RawClient bad(server.port());
  bad.send_bytes(RawClient::hello(kSecret, 3, 4343));
  ASSERT_TRUE(bad.read_reply().has_value());
  bad.send_bytes(beat_frame(-1));
  const std::optional<std::string> refused = bad.read_reply();
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("store: malformed beat"), std::string::npos);
  EXPECT_TRUE(bad.closed_by_server());
  EXPECT_EQ(server.stats().dead_ranks, 0u);  // the server closed it: no death
}

// TcpStoreClient::keep_alive beats on a connection of its own, every tenth of the limit, while a
// token lives (past the client itself), so a live rank is never taken for lost, even while its
// client waits in a long get; the last token's end stops the judging, and the beats' connection
// closes with a goodbye. A client that is no rank, or a limit of 0, gets no token.
TEST(StoreSilence, AClientKeepsItsRankAliveWhileATokenLives) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto waiter = rank_client(server, 0);
  auto rank = rank_client(server, 1);
  std::shared_ptr<void> token = rank->keep_alive(1s);
  ASSERT_NE(token, nullptr);
  // The rank's own connection held by a get three times the limit.
  EXPECT_EQ(try_get(*rank, "never", 3s).code, ErrorCode::timeout);
  std::shared_ptr<void> tighter = rank->keep_alive(500ms);  // the tightest limit holds
  token.reset();
  rank.reset();  // the beats go on while a token lives
  EXPECT_EQ(try_get(*waiter, "never", 2s).code, ErrorCode::timeout);
  tighter.reset();  // the end of the judging, then the beats' goodbye
  EXPECT_EQ(try_get(*waiter, "never", 1s).code, ErrorCode::timeout);
  ASSERT_TRUE(wait_until([&] { return server.stats().connections == 1; }, 10s));
  EXPECT_EQ(server.stats().dead_ranks, 0u);
  EXPECT_EQ(TcpStoreClient("127.0.0.1", server.port(), kSecret, 5s).keep_alive(1s), nullptr);
  EXPECT_EQ(waiter->keep_alive(0ms), nullptr);
  EXPECT_EQ(PlainStore().keep_alive(1s), nullptr);  // a store that cannot judge silence
}

TEST(StoreStrangers, ManyOneByteStrangersCostLittleMemoryAndAreCapped) {
  StoreServerLimits limits;
  limits.hello_grace = 0ms;  // each stranger may be dropped at once for the next (default: 2 s)
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  auto client = rank_client(server, 0);
  client->set("k", "v");
  constexpr size_t kStrangers = 300;
  std::vector<std::unique_ptr<RawClient>> strangers;
  for (size_t i = 0; i < kStrangers; ++i) {
    strangers.push_back(std::make_unique<RawClient>(server.port()));
    strangers.back()->send_bytes(std::string(1, '\x10'));  // the first byte of a frame header
  }
  ASSERT_TRUE(wait_until([&] { return server.stats().accepted >= kStrangers + 1; }, 20s));
  EXPECT_EQ(client->get("k", 5s), "v");  // the rank is still served
  const TcpStoreServer::Stats stats = server.stats();
  const StoreServerLimits defaults;
  EXPECT_LE(stats.unauthenticated, defaults.max_unauthenticated);
  EXPECT_GE(stats.dropped_strangers, kStrangers - defaults.max_unauthenticated);
  // Each stranger may hold at most a hello's worth; before the fix each cost 256 KiB, 75 MB here.
  const size_t bound = (size_t{256} << 10) /* read scratch */ +
                       defaults.max_unauthenticated * (proto::kMaxHelloBytes + 64) +
                       (size_t{64} << 10) /* the rank's buffers */;
  EXPECT_LE(stats.peak_buffered_bytes, bound);
}

// Before 2026-12-05 the server dropped the oldest stranger for every connection beyond the limit
// at once, so of 128 ranks started together on 2 cores, those not yet scheduled to send their
// hello lost their connections ("closed the connection during the hello").
TEST(StoreStrangers, RanksConnectingTogetherBeyondTheStrangersLimitAreAllServed) {
  StoreServerLimits limits;
  limits.max_unauthenticated = 4;
  limits.hello_grace = std::chrono::hours(1);  // none is dropped to make room in this test
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  constexpr int kRanks = 12;
  std::vector<std::unique_ptr<RawClient>> ranks;  // connected, none has said hello yet
  for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<RawClient>(server.port()));
  // The server takes the limit's worth; the others wait in the listener's backlog.
  ASSERT_TRUE(wait_until([&] { return server.stats().unauthenticated == 4; }, 10s));
  EXPECT_EQ(server.stats().accepted, 4u);
  for (int r = 0; r < kRanks; ++r) ranks[r]->send_bytes(RawClient::hello(kSecret, r, 100 + r));
  for (int r = 0; r < kRanks; ++r) {
    const std::optional<std::string> reply = ranks[r]->read_reply();
    ASSERT_TRUE(reply.has_value()) << "rank " << r << "'s connection was closed";
    EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::ok)) << "rank " << r;
  }
  // The server publishes its counters at the end of the round that sent the replies, which a
  // rank may read first (under load this read 1 or 4 strangers still open).
  EXPECT_TRUE(wait_until(
      [&] {
        const TcpStoreServer::Stats stats = server.stats();
        return stats.accepted == size_t{kRanks} && stats.unauthenticated == 0;
      },
      10s))
      << "accepted " << server.stats().accepted << ", strangers open "
      << server.stats().unauthenticated;
  EXPECT_EQ(server.stats().dropped_strangers, 0u);
}

// Past its grace a stranger gives its place to the next connection: a flood is still cut.
TEST(StoreStrangers, AStrangerPastItsGraceMakesRoomForTheNextConnection) {
  StoreServerLimits limits;
  limits.max_unauthenticated = 1;
  limits.hello_grace = 50ms;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  RawClient silent(server.port());
  ASSERT_TRUE(wait_until([&] { return server.stats().unauthenticated == 1; }, 10s));
  RawClient rank(server.port());
  rank.send_bytes(RawClient::hello(kSecret, 0, 100));
  const std::optional<std::string> reply = rank.read_reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::ok));
  EXPECT_TRUE(silent.closed_by_server());
  EXPECT_EQ(server.stats().dropped_strangers, 1u);
  EXPECT_EQ(server.stats().hello_timeouts, 0u);
}

TEST(StoreStrangers, SilentConnectionIsClosedAtTheHelloTimeout) {
  StoreServerLimits limits;
  limits.hello_timeout = 50ms;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  RawClient silent(server.port());
  EXPECT_TRUE(silent.closed_by_server());
  ASSERT_TRUE(wait_until([&] { return server.stats().hello_timeouts == 1; }, 10s));
  auto client = rank_client(server, 0);  // real clients say hello at once and are unaffected
  EXPECT_EQ(client->add("n", 1), 1);
}

// Lowers this process's descriptor limit so that exactly `free_slots` descriptors can still be
// opened; puts the old limit back when destroyed.
class DescriptorLimit {
 public:
  explicit DescriptorLimit(int free_slots) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    int free_seen = 0;
    rlim_t limit = 0;
    for (int fd = 0; static_cast<rlim_t>(fd) < saved_.rlim_cur; ++fd) {
      if (::fcntl(fd, F_GETFD) == -1 && free_seen++ == free_slots) {
        limit = static_cast<rlim_t>(fd);
        break;
      }
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = limit;
    ok_ = limit > 0 && ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
  }
  ~DescriptorLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

void connect_to(int fd, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
}

TEST(StoreStrangers, OutOfDescriptorsPausesAcceptingInsteadOfSpinning) {
  StoreServerLimits limits;
  limits.accept_retry = std::chrono::hours(1);  // only a closing connection resumes accepting
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  auto client = rank_client(server, 0);
  // This test's own ends of the connections, opened while descriptors are plentiful.
  constexpr int kRanks = 3, kStrangers = 3;
  std::vector<bootstrap::Socket> ranks, strangers;
  for (int i = 0; i < kRanks; ++i) ranks.emplace_back(::socket(AF_INET, SOCK_STREAM, 0));
  for (int i = 0; i < kStrangers; ++i) strangers.emplace_back(::socket(AF_INET, SOCK_STREAM, 0));
  DescriptorLimit fd_limit(kRanks);  // room for the server's ends of the ranks' connections only
  ASSERT_TRUE(fd_limit.ok());
  for (auto& s : ranks) {
    connect_to(s.fd(), server.port());
    const std::string hello = RawClient::hello(kSecret);
    ASSERT_EQ(bootstrap::send_all(s.fd(), hello.data(), hello.size(), RawClient::soon()),
              bootstrap::IoStatus::ok);
    bootstrap::set_nonblocking(s.fd());
    char reply[4 + 1 + 4 + 8];  // frame header, ok, host rank, host pid
    ASSERT_EQ(bootstrap::recv_all(s.fd(), reply, sizeof(reply), RawClient::soon()),
              bootstrap::IoStatus::ok)
        << "accepted " << server.stats().accepted << " failures " << server.stats().accept_failures
        << " dropped " << server.stats().dropped_strangers;
  }
  // The strangers wait in the listener's backlog: accept() fails with EMFILE, and with no stranger
  // to drop the server stops polling the listener.
  for (auto& s : strangers) connect_to(s.fd(), server.port());
  ASSERT_TRUE(wait_until([&] { return server.stats().accept_failures >= 1; }, 10s));
  // A request needs server rounds; a server that kept polling the readable listener would call
  // accept() (and fail) in each of them.
  client->set("k", "v");
  EXPECT_EQ(client->get("k", 5s), "v");
  EXPECT_EQ(server.stats().accept_failures, 1u);
  EXPECT_EQ(server.stats().connections, size_t{1 + kRanks});

  // A rank leaves: accepting resumes. Two descriptors are free (both ends of its connection were
  // in this process) for three strangers: the oldest is dropped to make room for the newest.
  ranks.pop_back();
  ASSERT_TRUE(wait_until([&] { return server.stats().accepted == 1 + kRanks + kStrangers; }, 10s));
  const TcpStoreServer::Stats stats = server.stats();
  EXPECT_EQ(stats.dropped_strangers, 1u);
  EXPECT_EQ(stats.unauthenticated, 2u);
  EXPECT_EQ(client->get("k", 5s), "v");
}

TEST(StoreServer, NetworkListenerWithoutSecretIsRefused) {
  try {
    TcpStoreServer open_server("0.0.0.0", 0, "");
    FAIL() << "a store reachable from other hosts started without a secret";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::bootstrap);
    EXPECT_NE(std::string(e.what()).find("TPF_JOB_SECRET"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("openssl rand -hex 16"), std::string::npos) << e.what();
  }
  TcpStoreServer guarded("0.0.0.0", 0, kSecret);
  TcpStoreServer local("127.0.0.1", 0, "");
  EXPECT_NE(guarded.port(), 0);
  EXPECT_NE(local.port(), 0);
}

}  // namespace
}  // namespace tpf
