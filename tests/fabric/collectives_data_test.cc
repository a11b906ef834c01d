// The data-movement collectives (broadcast, all_gather, all_to_all, gather, scatter), point to
// point send/recv and barrier, over every dtype x size class x rank count; results compared bit for
// bit with what each rank's deterministic input says they must be.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/coll_reference.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::testing {
namespace {

// Inputs of the data collectives: any values will do; use the "sum" kind.
std::vector<uint8_t> input(DType dt, size_t count, int rank, uint64_t salt) {
  return make_input(dt, ReduceOp::sum, count, rank, salt);
}

std::vector<size_t> counts_for(DType dt, int blocks) {
  std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
  if (is_large_dtype(dt)) counts.push_back(kLargeBytes / element_size(dt) / static_cast<size_t>(blocks) + 3);
  return counts;
}

template <class F>
void call(const std::string& name, F&& f) {
  // TPF_TEST_TRACE=1 prints each case before it runs: shows where a crashing rank was.
  static const bool trace = std::getenv("TPF_TEST_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "[trace] %s\n", name.c_str());
  try {
    f();
  } catch (const Error& e) {
    throw ChildCheckFailure(name + ": tpf::Error(" + error_code_name(e.code()) + "): " + e.what());
  }
}

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(20000);
  return o;
}

std::string n_name(const ::testing::TestParamInfo<int>& info) {
  return "N" + std::to_string(info.param);
}

void check(FailureLog& log, const std::string& name, DType dt, const void* got, const void* want,
           size_t count) {
  auto diff = compare_elements(dt, got, want, count);
  if (!diff.empty()) log.add(name + ": " + diff);
}

void broadcast_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  FailureLog log;
  uint64_t salt = 4000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, 1)) {
      for (bool in_place : {false, true}) {
        const int root = static_cast<int>(salt % static_cast<uint64_t>(n));
        const auto name = case_name("broadcast", dt, -1, count, in_place, root, me, n);
        const auto want = input(dt, count, root, ++salt);
        // Non-roots hold their own data in send, which must be ignored.
        std::vector<uint8_t> send = me == root ? want : input(dt, count, me, salt + 7777);
        GuardedBuffer out(count * es);
        if (in_place) {
          if (count > 0) std::memcpy(out.data(), send.data(), count * es);
          call(name, [&] { comm.broadcast(out.data(), out.data(), count, dt, root); });
        } else {
          call(name, [&] { comm.broadcast(send.data(), out.data(), count, dt, root); });
        }
        check(log, name, dt, out.data(), want.data(), count);
        if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
      }
    }
  }
  log.throw_if_any("broadcast");
}

void all_gather_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const size_t un = static_cast<size_t>(n), ume = static_cast<size_t>(me);
  FailureLog log;
  uint64_t salt = 5000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, n)) {
      for (bool in_place : {false, true}) {
        const auto name = case_name("all_gather", dt, -1, count, in_place, -1, me, n);
        ++salt;
        std::vector<uint8_t> want;
        for (int r = 0; r < n; ++r) {
          auto part = input(dt, count, r, salt);
          want.insert(want.end(), part.begin(), part.end());
        }
        const auto mine = input(dt, count, me, salt);
        std::vector<uint8_t> send = mine;
        GuardedBuffer out(un * count * es);
        if (in_place) {
          uint8_t* slot = out.data() + ume * count * es;
          if (count > 0) std::memcpy(slot, send.data(), count * es);
          call(name, [&] { comm.all_gather(slot, out.data(), count, dt); });
        } else {
          call(name, [&] { comm.all_gather(send.data(), out.data(), count, dt); });
          if (send != mine) log.add(name + ": the send buffer was modified");
        }
        check(log, name, dt, out.data(), want.data(), un * count);
        if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
      }
    }
  }
  log.throw_if_any("all_gather");
}

void all_to_all_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const size_t un = static_cast<size_t>(n), ume = static_cast<size_t>(me);
  FailureLog log;
  uint64_t salt = 6000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, n)) {
      const auto name = case_name("all_to_all", dt, -1, count, false, -1, me, n);
      ++salt;
      const auto mine = input(dt, un * count, me, salt);
      std::vector<uint8_t> want;
      for (int r = 0; r < n; ++r) {  // block me of rank r's send lands in block r of mine
        auto theirs = input(dt, un * count, r, salt);
        want.insert(want.end(), theirs.begin() + static_cast<std::ptrdiff_t>(ume * count * es),
                    theirs.begin() + static_cast<std::ptrdiff_t>((ume + 1) * count * es));
      }
      std::vector<uint8_t> send = mine;
      GuardedBuffer out(un * count * es);
      call(name, [&] { comm.all_to_all(send.data(), out.data(), count, dt); });
      if (send != mine) log.add(name + ": the send buffer was modified");
      check(log, name, dt, out.data(), want.data(), un * count);
      if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
    }
  }
  log.throw_if_any("all_to_all");
}

void gather_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const size_t un = static_cast<size_t>(n);
  FailureLog log;
  uint64_t salt = 7000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, n)) {
      const int root = static_cast<int>(salt % un);
      const auto name = case_name("gather", dt, -1, count, false, root, me, n);
      ++salt;
      const auto mine = input(dt, count, me, salt);
      std::vector<uint8_t> send = mine;
      // recv matters on the root only; the others pass none.
      GuardedBuffer out(me == root ? un * count * es : 0);
      call(name, [&] { comm.gather(send.data(), me == root ? out.data() : nullptr, count, dt, root); });
      if (send != mine) log.add(name + ": the send buffer was modified");
      if (me == root) {
        std::vector<uint8_t> want;
        for (int r = 0; r < n; ++r) {
          auto part = input(dt, count, r, salt);
          want.insert(want.end(), part.begin(), part.end());
        }
        check(log, name, dt, out.data(), want.data(), un * count);
      }
      if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
    }
  }
  log.throw_if_any("gather");
}

void scatter_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const size_t un = static_cast<size_t>(n), ume = static_cast<size_t>(me);
  FailureLog log;
  uint64_t salt = 8000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, n)) {
      const int root = static_cast<int>(salt % un);
      const auto name = case_name("scatter", dt, -1, count, false, root, me, n);
      ++salt;
      const auto all = input(dt, un * count, root, salt);
      std::vector<uint8_t> send = me == root ? all : std::vector<uint8_t>{};
      GuardedBuffer out(count * es);
      call(name, [&] {
        comm.scatter(me == root ? send.data() : nullptr, out.data(), count, dt, root);
      });
      if (me == root && send != all) log.add(name + ": the send buffer was modified");
      check(log, name, dt, out.data(), all.data() + ume * count * es, count);
      if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
    }
  }
  log.throw_if_any("scatter");
}

// Ring exchange, then several messages in a row between neighbours, matched in order.
void send_recv_matrix(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  FailureLog log;
  uint64_t salt = 9000;
  for (DType dt : kAllDTypes) {
    const size_t es = element_size(dt);
    for (size_t count : counts_for(dt, 1)) {
      const auto name = case_name("send/recv ring", dt, -1, count, false, -1, me, n);
      ++salt;
      const auto mine = input(dt, count, me, salt);
      const auto want = input(dt, count, prev, salt);
      GuardedBuffer out(count * es);
      // Even ranks send first, odd ranks receive first: no cycle of blocked senders, whatever the
      // transport buffers.
      auto do_send = [&] { call(name + " send", [&] { comm.send(mine.data(), count, dt, next); }); };
      auto do_recv = [&] { call(name + " recv", [&] { comm.recv(out.data(), count, dt, prev); }); };
      if (me % 2 == 0) {
        do_send();
        do_recv();
      } else {
        do_recv();
        do_send();
      }
      check(log, name, dt, out.data(), want.data(), count);
      if (!out.guards_intact()) log.add(name + ": wrote outside the receive buffer");
    }
  }
  // Several messages of different sizes from rank 0 to rank n-1 arrive in the order sent.
  const size_t sizes[] = {7, 1, 4099, 0, 3};
  if (me == 0 || me == n - 1) {
    for (size_t k = 0; k < std::size(sizes); ++k) {
      const auto name = "send/recv in-order message " + std::to_string(k) + " (rank " + std::to_string(me) + ")";
      const auto msg = input(DType::i32, sizes[k], 0, 9900 + k);
      if (me == 0) {
        call(name, [&] { comm.send(msg.data(), sizes[k], DType::i32, n - 1); });
      } else {
        GuardedBuffer out(sizes[k] * 4);
        call(name, [&] { comm.recv(out.data(), sizes[k], DType::i32, 0); });
        check(log, name, DType::i32, out.data(), msg.data(), sizes[k]);
      }
    }
  }
  log.throw_if_any("send/recv");
}

class BroadcastTest : public ::testing::TestWithParam<int> {};
TEST_P(BroadcastTest, EveryDTypeSizeAndRoot) {
  expect_all_ok(run_ranks(GetParam(), broadcast_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, BroadcastTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class AllGatherTest : public ::testing::TestWithParam<int> {};
TEST_P(AllGatherTest, EveryDTypeAndSize) {
  expect_all_ok(run_ranks(GetParam(), all_gather_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, AllGatherTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class AllToAllTest : public ::testing::TestWithParam<int> {};
TEST_P(AllToAllTest, EveryDTypeAndSize) {
  expect_all_ok(run_ranks(GetParam(), all_to_all_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, AllToAllTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class GatherTest : public ::testing::TestWithParam<int> {};
TEST_P(GatherTest, EveryDTypeSizeAndRoot) {
  expect_all_ok(run_ranks(GetParam(), gather_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, GatherTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

class ScatterTest : public ::testing::TestWithParam<int> {};
TEST_P(ScatterTest, EveryDTypeSizeAndRoot) {
  expect_all_ok(run_ranks(GetParam(), scatter_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, ScatterTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

// Sending to oneself is invalid, so point to point starts at two ranks.
class SendRecvTest : public ::testing::TestWithParam<int> {};
TEST_P(SendRecvTest, RingAndInOrderMessages) {
  expect_all_ok(run_ranks(GetParam(), send_recv_matrix, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, SendRecvTest, ::testing::Values(2, 3, 4, 8), n_name);

// Nobody leaves a barrier before everyone has entered it: each rank bumps a counter in memory
// shared by all ranks (not the communicator's) before the barrier and checks it after.
class BarrierTest : public ::testing::TestWithParam<int> {};
TEST_P(BarrierTest, NoRankLeavesBeforeAllArrive) {
  SharedBlock shared;
  auto& arrived = shared.counter(0);
  expect_all_ok(run_ranks(GetParam(), [&](Communicator& comm) {
    const int n = comm.size();
    for (int round = 0; round < 20; ++round) {
      arrived.fetch_add(1);
      if (round % 2 == 0) {
        comm.barrier();
      } else {
        comm.barrier_async().wait();
      }
      const int64_t seen = arrived.load();
      TPF_CHILD_CHECK(seen >= int64_t{n} * (round + 1),
                      "round " + std::to_string(round) + ": left the barrier having seen " +
                          std::to_string(seen) + " arrivals of " + std::to_string(n * (round + 1)));
    }
  }, run_options()));
}
INSTANTIATE_TEST_SUITE_P(Ranks, BarrierTest, ::testing::Values(1, 2, 3, 4, 8), n_name);

}  // namespace
}  // namespace tpf::testing
