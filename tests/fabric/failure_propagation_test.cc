// The first failure is the one every rank reports: ranks pass the root cause on as data (its code
// and its original message), never re-wrapped, so a chain of failures does not lose it; and a
// process that fails on one communicator and exits is reported on its other communicators by that
// root cause, not as a mere death.
#include <gtest/gtest.h>
#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::testing {
namespace {

using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = milliseconds(30000);
  return o;
}

// Rank 1 receives 32 elements where rank 0 sent 64 (the root: a mismatch); rank 2 waits for rank
// 1, rank 3 for rank 2. Each sees its peer fail; with the old nested messages, cut at 255 bytes,
// the far end of the chain lost the two calls. The long name makes every wrapping long.
TEST(FailurePropagation, ChainOfFailuresKeepsTheRootCauseOnEveryRank) {
  const std::string name = "pipeline-" + std::string(160, 'x');
  expect_all_ok(run_ranks_raw(4, [&](const RankContext& ctx) {
    const size_t colon = ctx.store_address.rfind(':');
    auto store = std::make_shared<TcpStoreClient>(
        ctx.store_address.substr(0, colon),
        static_cast<uint16_t>(std::stoi(ctx.store_address.substr(colon + 1))), ctx.secret,
        milliseconds(30000));
    Communicator comm = Communicator::create(ctx.rank, ctx.size, store, name, ctx.comm_options);
    const int me = comm.rank();
    std::vector<int32_t> buf(64, 5);
    Error e(ErrorCode::internal, "none");
    if (me == 0) {
      comm.send(buf.data(), 64, DType::i32, 1);  // staged: returns before rank 1 looks at it
      e = expect_error("barrier after the send", [&] { comm.barrier(); });
    } else {
      e = expect_error("recv in the chain", [&] { comm.recv(buf.data(), me == 1 ? 32 : 64, DType::i32, me - 1); });
    }
    const std::string m = e.what();
    TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, "rank " + std::to_string(me) + ": " + m);
    TPF_CHILD_CHECK(contains(m, "count=32") && contains(m, "count=64"),
                    "rank " + std::to_string(me) + " lost the root cause: " + m);
    TPF_CHILD_CHECK(occurrences(m, "failed earlier") <= 1,
                    "rank " + std::to_string(me) + " nests earlier failures: " + m);
  }, run_options()));
}

// Ranks 0 and 1 fail on their pair communicator (a count mismatch), destroy the world
// communicator and exit. Ranks 2 and 3 then wait for them on the world communicator: they report
// the mismatch, not that 0 and 1 left or died.
TEST(FailurePropagation, OtherCommunicatorsReportTheRootCauseOfARankThatExited) {
  expect_all_ok(run_ranks(4, [](Communicator& world) {
    const int me = world.rank();
    Communicator pair = world.split(me / 2, me);
    std::vector<float> a(16, 1.0f), b(16);
    if (me < 2) {
      Error e = expect_error("all_reduce with different counts", [&] {
        pair.all_reduce(a.data(), b.data(), me == 0 ? 10 : 11, DType::f32, ReduceOp::sum);
      });
      TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
      return;  // leaves world without another word
    }
    Error e = expect_error("world all_reduce without ranks 0 and 1", [&] {
      world.all_reduce(a.data(), b.data(), 16, DType::f32, ReduceOp::sum);
    });
    const std::string m = e.what();
    TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, "code " + std::string(error_code_name(e.code())) + ": " + m);
    TPF_CHILD_CHECK(contains(m, "after a failure elsewhere") && contains(m, "count=10") &&
                        contains(m, "count=11"),
                    "message: " + m);
  }, run_options()));
}

// A communicator aborted on one rank, which then exits: its peers on other communicators learn
// of the abort too.
TEST(FailurePropagation, AbortIsTheRootCauseOnOtherCommunicators) {
  expect_all_ok(run_ranks(3, [](Communicator& world) {
    const int me = world.rank();
    Communicator sub = world.split(me == 0 ? 0 : 1, me);
    if (me == 0) {
      sub.abort();
      return;
    }
    Error e = expect_error("world barrier without rank 0", [&] { world.barrier(); });
    TPF_CHILD_CHECK(e.code() == ErrorCode::aborted,
                    "code " + std::string(error_code_name(e.code())) + ": " + e.what());
  }, run_options()));
}

// A rank that destroys the communicator while its peers wait for it in operations it never
// joins (a collective, a receive) is named by them at once, as a mismatch in the ranks' calls:
// before 2026-12-06 they waited for their deadline (ten minutes here) and then said it "never
// arrived". The rank stays alive meanwhile, so nothing else could explain it.
TEST(FailurePropagation, ARankThatDestroyedTheCommunicatorIsNamedByThoseWaitingForIt) {
  SharedBlock shared;
  RunOptions options;
  options.comm_options.timeout = std::chrono::minutes(10);
  expect_all_ok(run_ranks(
      3,
      [&](Communicator& world) {
        const int me = world.rank();
        std::optional<Communicator> comm = world.split(0, me);
        if (me == 2) {
          comm.reset();
          shared.counter(0).store(1);
          TPF_CHILD_CHECK(
              wait_until([&] { return shared.counter(1).load() == 2; }, std::chrono::seconds(60)),
              "the others never failed");
          return;
        }
        Error e(ErrorCode::internal, "none");
        if (me == 0) {
          int32_t value = 1, sum = 0;
          e = expect_error("all_reduce without rank 2",
                           [&] { comm->all_reduce(&value, &sum, 1, DType::i32, ReduceOp::sum); });
        } else {
          TPF_CHILD_CHECK(
              wait_until([&] { return shared.counter(0).load() == 1; }, std::chrono::seconds(60)),
              "rank 2 never destroyed its communicator");
          int32_t never = -1;
          e = expect_error("recv from rank 2", [&] { comm->recv(&never, 1, DType::i32, 2); });
          TPF_CHILD_CHECK(never == -1, "the buffer was written");
        }
        shared.counter(1).fetch_add(1);
        TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch,
                        "code " + std::string(error_code_name(e.code())) + ": " + e.what());
        TPF_CHILD_CHECK(contains(e.what(), "rank 2 destroyed the communicator"), e.what());
      },
      options));
}

// The parent (this gtest process) aborts a communicator of its own, then forks ranks: they must
// not inherit its failure as theirs (a killed rank is peer_died, not "aborted by the parent").
TEST(FailurePropagation, ForkedRanksDoNotInheritTheParentsFailure) {
  {
    TcpStoreServer server("127.0.0.1", 0, "parent-secret-0123456789");
    Communicator mine = Communicator::create(
        0, 1, "127.0.0.1:" + std::to_string(server.port()), "parent-secret-0123456789");
    mine.abort();
  }
  const auto outcomes = run_ranks(3, [](Communicator& comm) {
    comm.barrier();
    if (comm.rank() == 2) ::raise(SIGKILL);
    Error e = expect_error("barrier with rank 2 killed", [&] { comm.barrier(); });
    TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died,
                    "code " + std::string(error_code_name(e.code())) + ": " + e.what());
  }, run_options());
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
  EXPECT_TRUE(outcomes[1].ok()) << outcomes[1].describe();
  EXPECT_EQ(outcomes[2].signal, SIGKILL) << outcomes[2].describe();
}

}  // namespace
}  // namespace tpf::testing
