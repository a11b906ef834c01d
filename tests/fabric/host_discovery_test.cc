// The discovery of every rank's host as a function, on a store in memory (MemoryStore: a key
// not set is a timeout at once): what its waits name when a rank does not come.
#include "comm/host_discovery.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "support/memory_store.h"
#include "tpf/error.h"

namespace tpf::detail {
namespace {

using namespace std::chrono_literals;

JoiningRank joining(const std::string& host) { return {host, "", "", "", 7, ::getpid()}; }

// The error rank `rank` of `size`, on host "h", meets discovering the hosts through `store`
// (none, a test failure, if it meets none).
Error discovery_error(testing::MemoryStore& store, int rank, int size,
                      const DiscoveryContext& context) {
  try {
    discover_hosts(store, rank, size, joining("h"), context);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::internal, "no error");
}

// Rank 0 names the ranks whose entries did not come, with their job ranks in a communicator
// that numbers them otherwise (a split).
TEST(HostDiscovery, Rank0NamesTheRanksThatDidNotJoinWithTheirJobRanks) {
  testing::MemoryStore store;
  store.set("host/1", "h\t\t\t\t\t8\t1");
  const DiscoveryContext context{50ms, "communicator 'x'", transport::RankNames({4, 6, 8, 9}), 0ms};
  const Error e = discovery_error(store, 0, 4, context);
  EXPECT_EQ(e.code(), ErrorCode::timeout);
  EXPECT_EQ(std::string(e.what()),
            "communicator 'x': ranks 2, 3 (job ranks 8, 9) did not join within 50 ms while "
            "creating the communicator (not started, or stuck before it)");
  EXPECT_TRUE(store.check("host/0")) << "rank 0 publishes its own entry first";
}

// A rank waiting for rank 0's list of hosts reads rank 0's own entry and, rank 0 being on its
// host, looks at its process: one that has exited is named at once, not at the deadline.
TEST(HostDiscovery, ARankWaitingForTheListNamesARank0OfItsHostThatHasExited) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  testing::MemoryStore store;
  store.set("host/0", "h\t\t\t\t\t9\t" + std::to_string(child));
  const DiscoveryContext context{60s, "communicator 'x'", {}, 1000ms};
  const Error e = discovery_error(store, 1, 2, context);
  EXPECT_EQ(e.code(), ErrorCode::peer_died);
  EXPECT_EQ(std::string(e.what()),
            "communicator 'x': rank 0 (pid " + std::to_string(child) +
                ") died (its process exited or was killed) while creating the communicator "
                "(waiting for its list of hosts)");
}

// Rank 0 on another host is left to the deadline, whose error says the whole wait.
TEST(HostDiscovery, ARankWaitingForTheListOfARank0ElsewhereWaitsUntilTheDeadline) {
  testing::MemoryStore store;
  store.set("host/0", "elsewhere\t\t\t\t\t9\t1");
  const DiscoveryContext context{50ms, "communicator 'x'", {}, 1000ms};
  const Error e = discovery_error(store, 1, 2, context);
  EXPECT_EQ(e.code(), ErrorCode::timeout);
  const std::string what = e.what();
  EXPECT_EQ(what.rfind("communicator 'x': learning every rank's host (waiting for rank 0's list "
                       "of hosts) failed: ",
                       0),
            0u)
      << what;
  EXPECT_NE(what.find("(the last slice of a wait of 50 ms)"), std::string::npos) << what;
}

}  // namespace
}  // namespace tpf::detail
