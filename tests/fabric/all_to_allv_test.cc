// all_to_allv: a count per pair, displacements with gaps, against a reference built from the
// definition; counts that disagree and one rank's invalid arguments fail every rank alike.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::testing {
namespace {

// Elements rank i sends to rank j: 0 to 6 times `scale`, zero for some pairs (rank 0 to itself
// among them).
size_t pair_count(int i, int j, size_t scale = 1) {
  return static_cast<size_t>((i * 3 + j * 5) % 7) * scale;
}
// Element k of the block from i to j, distinct for every (i, j, k) with i, j < 16, k < 2^20.
int32_t value(int i, int j, size_t k) { return ((i * 16 + j) << 20) + static_cast<int32_t>(k); }
constexpr int32_t kUntouched = -1;

// One rank's layout: send blocks in rank order with 2 unused elements before each, receive blocks
// in reverse rank order with 1 unused element before each.
struct Layout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_elems = 0, recv_elems = 0;
};
Layout layout_of(int me, int n, size_t scale = 1) {
  Layout l;
  for (int j = 0; j < n; ++j) {
    l.send_counts.push_back(pair_count(me, j, scale));
    l.send_displs.push_back(l.send_elems + 2);
    l.send_elems += 2 + pair_count(me, j, scale);
  }
  l.recv_counts.assign(n, 0);
  l.recv_displs.assign(n, 0);
  for (int i = n - 1; i >= 0; --i) {
    l.recv_counts[i] = pair_count(i, me, scale);
    l.recv_displs[i] = l.recv_elems + 1;
    l.recv_elems += 1 + pair_count(i, me, scale);
  }
  return l;
}

std::vector<int32_t> send_buffer(int me, int n, const Layout& l) {
  std::vector<int32_t> send(l.send_elems, kUntouched);
  for (int j = 0; j < n; ++j) {
    for (size_t k = 0; k < l.send_counts[j]; ++k) send[l.send_displs[j] + k] = value(me, j, k);
  }
  return send;
}

void check_received(int me, int n, const Layout& l, const std::vector<int32_t>& recv) {
  std::vector<int32_t> want(l.recv_elems, kUntouched);  // the gaps stay as they were
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < l.recv_counts[i]; ++k) want[l.recv_displs[i] + k] = value(i, me, k);
  }
  for (size_t e = 0; e < want.size(); ++e) {
    TPF_CHILD_CHECK(recv[e] == want[e], "rank " + std::to_string(me) + " element " +
                                            std::to_string(e) + ": got " + std::to_string(recv[e]) +
                                            ", want " + std::to_string(want[e]));
  }
}

void exchange_and_check(Communicator& comm, size_t scale = 1) {
  const int me = comm.rank(), n = comm.size();
  const Layout l = layout_of(me, n, scale);
  const std::vector<int32_t> send = send_buffer(me, n, l);
  std::vector<int32_t> recv(l.recv_elems, kUntouched);
  comm.all_to_allv(send.data(), l.send_counts, l.send_displs, recv.data(), l.recv_counts,
                   l.recv_displs, DType::i32);
  check_received(me, n, l, recv);
}

TEST(AllToAllV, UnevenBlocksWithGapsMatchTheDefinition) {
  expect_all_ok(run_ranks(4, [](Communicator& comm) {
    exchange_and_check(comm);
    exchange_and_check(comm);  // twice: nothing of the first call is left over
    // Every count zero: returns without moving anything.
    const std::vector<size_t> zeros(4, 0);
    comm.all_to_allv(nullptr, zeros, zeros, nullptr, zeros, zeros, DType::f64);
  }));
}

// Across hosts (ranks 0, 2, 4 on one, 1, 3 on another: TPF_NODE_ID, each host's ranks apart),
// over the network between them: small blocks (one round between the leaders), and blocks of up
// to 120000 elements (padded to the largest pair's, 480 KB: the leaders' all_to_all pipelined on
// interleaved hosts).
TEST(AllToAllV, UnevenBlocksAcrossTwoHosts) {
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(30000);
  expect_all_ok(run_ranks_raw(
      5,
      [](const RankContext& ctx) {
        ::setenv("TPF_NODE_ID", ctx.rank % 2 == 0 ? "a2av-host-a" : "a2av-host-b", 1);
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        TPF_CHILD_CHECK(comm.host_count() == 2, "expected 2 hosts");
        exchange_and_check(comm);
        exchange_and_check(comm, 20000);
      },
      options));
}

TEST(AllToAllV, CountsThatDisagreeAreAMismatchOnEveryRank) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank();
    Layout l = layout_of(me, 3);
    if (me == 2) l.recv_counts[1] += 1;  // rank 1 sends pair_count(1, 2) = 6 elements to rank 2
    std::vector<int32_t> send(l.send_elems), recv(l.recv_elems + 1);
    const Error e = expect_error("all_to_allv", [&] {
      comm.all_to_allv(send.data(), l.send_counts, l.send_displs, recv.data(), l.recv_counts,
                       l.recv_displs, DType::i32);
    });
    TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
    TPF_CHILD_CHECK(std::string(e.what()).find("rank 1 sends 6 elements to rank 2, which expects "
                                               "7 (its recv_counts[1])") != std::string::npos,
                    e.what());
    exchange_and_check(comm);  // the communicator is still usable
  }));
}

TEST(AllToAllV, OneRanksInvalidArgumentsFailEveryRank) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank();
    Layout l = layout_of(me, 3);
    std::vector<int32_t> send(l.send_elems), recv(l.recv_elems);
    // Rank 1's receive blocks from ranks 0 and 2 overlap.
    if (me == 1) l.recv_displs[2] = l.recv_displs[0];
    const Error e = expect_error("overlapping blocks", [&] {
      comm.all_to_allv(send.data(), l.send_counts, l.send_displs, recv.data(), l.recv_counts,
                       l.recv_displs, DType::i32);
    });
    TPF_CHILD_CHECK(e.code() == ErrorCode::invalid_argument, e.what());
    const std::string want = me == 1 ? "rank 1: the receive blocks from ranks 0 and 2 overlap"
                                     : "rank 1 passed invalid arguments";
    TPF_CHILD_CHECK(std::string(e.what()).find(want) != std::string::npos, e.what());
    // Rank 2 passes one count too few.
    Layout good = layout_of(me, 3);
    if (me == 2) good.send_counts.pop_back();
    const Error short_list = expect_error("short count list", [&] {
      comm.all_to_allv(send.data(), good.send_counts, good.send_displs, recv.data(),
                       good.recv_counts, good.recv_displs, DType::i32);
    });
    const std::string want_short =
        me == 2 ? "hold 2, 3, 3 and 3 entries; each must hold one per rank (3)"
                : "rank 2 passed invalid arguments";
    TPF_CHILD_CHECK(std::string(short_list.what()).find(want_short) != std::string::npos,
                    short_list.what());
    exchange_and_check(comm);
  }));
}

// The async form: queued in issue order between other async collectives, with count arrays that
// are gone before it runs (it copies them), and its errors delivered by the Work on every rank.
TEST(AllToAllV, AsyncFormRunsInIssueOrderAndReportsThroughItsWork) {
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    const int me = comm.rank(), n = comm.size();
    const Layout l = layout_of(me, n);
    const std::vector<int32_t> send = send_buffer(me, n, l);
    std::vector<int32_t> recv(l.recv_elems, kUntouched);
    double before = me + 1.0, after = 10.0 * (me + 1);
    Work first = comm.all_reduce_async(&before, &before, 1, DType::f64, ReduceOp::sum);
    Work exchange;
    {
      Layout copy = l;  // destroyed before the exchange is waited for
      exchange =
          comm.all_to_allv_async(send.data(), copy.send_counts, copy.send_displs, recv.data(),
                                 copy.recv_counts, copy.recv_displs, DType::i32);
    }
    Work last = comm.all_reduce_async(&after, &after, 1, DType::f64, ReduceOp::sum);
    last.wait();
    exchange.wait();
    first.wait();
    TPF_CHILD_CHECK(before == 6.0 && after == 60.0, "the all_reduces around it");
    check_received(me, n, l, recv);

    Layout bad = l;
    if (me == 0) bad.recv_counts[2] += 1;  // rank 2 sends pair_count(2, 0) = 6 to rank 0
    std::vector<int32_t> wide(l.recv_elems + 1);
    Work mismatched =
        comm.all_to_allv_async(send.data(), bad.send_counts, bad.send_displs, wide.data(),
                               bad.recv_counts, bad.recv_displs, DType::i32);
    const Error e = expect_error("mismatched async all_to_allv", [&] { mismatched.wait(); });
    TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
    TPF_CHILD_CHECK(
        std::string(e.what()).find("rank 2 sends 6 elements to rank 0") != std::string::npos,
        e.what());
    exchange_and_check(comm);  // still usable, still in step
  }));
}

}  // namespace
}  // namespace tpf::testing
