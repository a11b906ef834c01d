// The open-file limit against the descriptors a communicator holds for its peers
// (base/open_files.h, comm/open_file_room.h). Before 2026-12-05, a rank whose soft limit could
// not hold a socket per rank on another host (2,048 ranks of 8 per host against the usual 1,024)
// failed its connects as "Destination is unreachable", one rank was killed by an assertion inside
// UCX, and nothing said which limit to raise.

#include "base/open_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/open_file_room.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "topo/hosts.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "transport/shm_segment.h"

namespace tpf {
namespace {

using testing::RankContext;

// Lowers this process's limits to what is open now plus `soft_more` and, if given, `hard_more`
// (only lowered: raising a hard limit takes a capability; every caller is a child process).
void set_open_file_limit(uint64_t soft_more, std::optional<uint64_t> hard_more = std::nullopt) {
  const uint64_t open = base::open_files().open;
  rlimit limit{};
  TPF_CHILD_CHECK(::getrlimit(RLIMIT_NOFILE, &limit) == 0, "getrlimit");
  if (hard_more) limit.rlim_max = static_cast<rlim_t>(open + *hard_more);
  limit.rlim_cur = static_cast<rlim_t>(open + soft_more);
  TPF_CHILD_CHECK(limit.rlim_cur <= limit.rlim_max, "the hard limit is already too low");
  TPF_CHILD_CHECK(::setrlimit(RLIMIT_NOFILE, &limit) == 0, "setrlimit");
}

TEST(OpenFiles, WhatOneProcessTellsOthersOfItsLimitReadsBack) {
  const base::OpenFiles limited{12, 100, 4096};
  const std::optional<base::OpenFiles> read =
      base::decode_open_files(base::encode_open_files(limited));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->open, 12u);
  EXPECT_EQ(read->hard, 4096u);
  EXPECT_EQ(read->room(), 4084u);
  const base::OpenFiles unlimited{7, base::kUnlimitedFiles, base::kUnlimitedFiles};
  EXPECT_EQ(base::encode_open_files(unlimited), "7/unlimited");
  EXPECT_EQ(base::decode_open_files("7/unlimited")->hard, base::kUnlimitedFiles);
  for (const char* text : {"", "12", "/4096", "x/4096", "12/", "12/40x", "12/-1", "-3/9"}) {
    EXPECT_FALSE(base::decode_open_files(text).has_value()) << text;
  }
}

TEST(OpenFiles, TheSoftLimitRisesToWhatIsAskedAndNoFurtherThanTheHardLimit) {
  testing::expect_all_ok(testing::run_ranks_raw(1, [](const RankContext&) {
    set_open_file_limit(10, 100);
    const uint64_t open = base::open_files().open;
    base::OpenFiles after = base::make_room_for_files(50, 20);
    TPF_CHILD_CHECK(after.soft == open + 70, "soft " + std::to_string(after.soft));
    TPF_CHILD_CHECK(base::open_files().soft == open + 70, "not applied");
    after = base::make_room_for_files(500, 0);
    TPF_CHILD_CHECK(after.soft == open + 100, "past the hard limit: " + std::to_string(after.soft));
    after = base::make_room_for_files(1, 0);  // never lowers
    TPF_CHILD_CHECK(base::open_files().soft == open + 100, std::to_string(after.soft));
  }));
}

// Where not even /proc/self/fd can be opened, the process is at its limit: it counts as full,
// not as empty (which would take a limit already spent for room).
TEST(OpenFiles, AProcessWithNoDescriptorLeftCountsAsFull) {
  testing::expect_all_ok(testing::run_ranks_raw(1, [](const RankContext&) {
    set_open_file_limit(8);
    std::vector<int> taken;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) taken.push_back(fd);
    const base::OpenFiles files = base::open_files();
    for (int fd : taken) ::close(fd);
    TPF_CHILD_CHECK(files.open == files.soft,
                    std::to_string(files.open) + " open of " + std::to_string(files.soft));
  }));
}

TEST(OpenFileRoom, ARankHoldsAPidfdPerHostMateAndTwoSocketsPerRankElsewhere) {
  const topo::HostMap one_host({"a", "a", "a", "a"});
  EXPECT_EQ(detail::files_for_communicator(one_host, 0), 3u);
  const topo::HostMap uneven({"a", "a", "a", "b"});
  EXPECT_EQ(detail::files_for_communicator(uneven, 0), 2u + 32u + 2u);
  EXPECT_EQ(detail::files_for_communicator(uneven, 3), 0u + 32u + 6u);
}

// Ranks on `keys`, each limited by limit(rank) before it creates its communicator.
std::vector<testing::RankOutcome> run_limited(
    const std::vector<std::string>& keys, const std::function<void(int rank)>& limit,
    const std::function<void(const RankContext&)>& create_and_check,
    const std::string& job_name = "") {
  testing::RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(30000);
  options.job_name = job_name;
  return testing::run_ranks_raw(
      static_cast<int>(keys.size()),
      [&](const RankContext& ctx) {
        ::setenv("TPF_NODE_ID", keys[ctx.rank].c_str(), 1);
        limit(ctx.rank);
        create_and_check(ctx);
      },
      options);
}

// Sixteen ranks on one host, and two hosts of six, each rank's soft limit 12 above what it has
// open (room to join: a store connection, the files its host key is read from; a sanitizer's
// runtime needs a few more): it holds a pidfd per host-mate (15), or 5 and a socket per rank
// elsewhere (6) and UCX's worker (measured 14). It raises its soft limit to what the communicator
// may need and 256 more. (Without: on one host a rank failed to open a peer's segment; across
// hosts one was killed by an assertion inside UCX.)
TEST(OpenFileRoom, ARankRaisesASoftLimitTooLowForItsPeers) {
  for (const std::vector<std::string>& keys :
       {std::vector<std::string>(16, "host-a"),
        std::vector<std::string>{"host-a", "host-a", "host-a", "host-a", "host-a", "host-a",
                                 "host-b", "host-b", "host-b", "host-b", "host-b", "host-b"}}) {
    SCOPED_TRACE(std::to_string(keys.size()) + " ranks");
    testing::expect_all_ok(run_limited(
        keys, [](int) { set_open_file_limit(12); },
        [&](const RankContext& ctx) {
          const uint64_t open_before = base::open_files().open;
          Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address,
                                                   ctx.secret, ctx.comm_options);
          int64_t sum = comm.rank();
          comm.all_reduce(&sum, &sum, 1, DType::i64, ReduceOp::sum);
          TPF_CHILD_CHECK(sum == int64_t{ctx.size} * (ctx.size - 1) / 2, std::to_string(sum));
          const uint64_t soft = base::open_files().soft;
          const uint64_t wanted = open_before +
                                  detail::files_for_communicator(topo::HostMap(keys), ctx.rank) +
                                  detail::kSpareFiles;
          TPF_CHILD_CHECK(soft >= wanted, "soft limit " + std::to_string(soft) + ", not " +
                                              std::to_string(wanted) + " or more");
        }));
  }
}

// Rank 2's hard limit holds 10 more files; it needs 2 pidfds, 6 sockets and 32 for the network.
// Every rank fails while creating the communicator, naming rank 2 and what to raise, instead of
// rank 2 failing its connects and the others waiting for it.
TEST(OpenFileRoom, ARankWhoseHardLimitCannotHoldItsPeersIsNamedByEveryRank) {
  const std::string job = "open-files-" + std::to_string(::getpid());
  testing::expect_all_ok(run_limited(
      {"host-a", "host-a", "host-a", "host-b", "host-b", "host-b"},
      [](int rank) {
        if (rank == 2) set_open_file_limit(10, 10);
      },
      [](const RankContext& ctx) {
        const Error e = testing::expect_error("a rank without room for its peers' files", [&] {
          Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret, ctx.comm_options);
        });
        TPF_CHILD_CHECK(e.code() == ErrorCode::resource, e.what());
        const std::string what = e.what();
        for (const char* word :
             {"rank 2 cannot open a descriptor for each of its peers", "rank 2 on host 'host-a'",
              "needs up to 40 more, for 3 ranks on other hosts and 2 on its own",
              "raise the hard open-file limit"}) {
          TPF_CHILD_CHECK(what.find(word) != std::string::npos,
                          std::string("no \"") + word + "\" in: " + what);
        }
      },
      job));
  EXPECT_EQ(testing::list_dev_shm(transport::shm_job_prefix(job).substr(1)),
            std::vector<std::string>{});
}

}  // namespace
}  // namespace tpf
