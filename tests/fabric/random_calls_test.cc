// Seeded random sequences of calls on communicators whose ranks are on several hosts (TPF_NODE_ID
// per rank, as in across_hosts_test.cc): what the fixed matrices there do not reach, calls of every
// kind, dtype, op, size and root one after another, in place or not, blocking or async, beside an
// all_reduce in flight on the parent communicator, on communicators split off in between, with
// the cost model's choices moved by the link's speed. The inputs are small integers, so every
// reduction is exact in any order and the results are compared bit for bit with the serial
// reference of coll_reference.h, whatever algorithm ran.
//
// Then the same sequences with one rank's call changed (its root, count, dtype, op or kind): every
// rank must fail with a mismatch, as on one host. The first runs of these (2026-12-06) found a
// root that only a host-mate disagreed on going unnoticed (across_hosts_test.cc:
// ARootOnlyAHostMateDisagreesOnIsAMismatchOnEveryRank), and two ranks that each took themselves
// for a small broadcast's root passing a barrier after it where they arrived in one order
// (eager_messages_test.cc: DisagreeingBroadcastRootsAreReportedAtTheNextStagedStep).
//
// And a rank killed, or stopped, at a random call: every survivor must name it.
//
// More seeds than CI runs: TPF_TEST_RANDOM_SEEDS=N runs N per layout.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "support/coll_reference.h"
#include "support/expect_error.h"
#include "support/multiproc.h"
#include "support/on_hosts.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/half.h"

namespace tpf::testing {
namespace {

enum class Kind {
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  all_to_all,
  gather,
  scatter,
  ring_shift,  // send to rank + k, receive from rank - k
  barrier,
  split,
};
constexpr int kKinds = static_cast<int>(Kind::split) + 1;
constexpr const char* kKindNames[kKinds] = {
    "all_reduce", "reduce",  "broadcast",  "all_gather", "reduce_scatter", "all_to_all",
    "gather",     "scatter", "ring_shift", "barrier",    "split"};

bool reduces(Kind k) {
  return k == Kind::all_reduce || k == Kind::reduce || k == Kind::reduce_scatter;
}
bool rooted(Kind k) {
  return k == Kind::reduce || k == Kind::broadcast || k == Kind::gather || k == Kind::scatter;
}

// One call, drawn alike on every rank. `count` is per block where the call has a block per rank.
struct Call {
  Kind kind = Kind::barrier;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  size_t count = 1;
  uint64_t root_draw = 0;  // root = root_draw % size; a ring shift's distance
  bool in_place = false;
  bool async = false;
  bool on_split = false;           // on the communicator the last split made, where there is one
  bool beside_all_reduce = false;  // an async all_reduce on the parent in flight meanwhile
  uint64_t salt = 0;               // inputs, and a split's colors and keys

  std::string describe(int rank) const {
    std::string s = std::string(kKindNames[static_cast<int>(kind)]) + " " + dtype_name(dtype) +
                    " x " + std::to_string(count);
    if (reduces(kind)) s += std::string(" ") + reduce_op_name(op);
    if (rooted(kind)) s += " root draw " + std::to_string(root_draw);
    if (in_place) s += " in place";
    if (async) s += " async";
    if (on_split) s += " on the split";
    if (beside_all_reduce) s += " beside an all_reduce";
    return s + " (rank " + std::to_string(rank) + ")";
  }
};

Call draw(std::mt19937_64& rng, size_t max_count) {
  Call c;
  c.kind = static_cast<Kind>(rng() % kKinds);
  c.dtype = kAllDTypes[rng() % std::size(kAllDTypes)];
  c.op = kAllOps[rng() % std::size(kAllOps)];
  // Log-uniform from 1 to max_count, a power of two a quarter of the time (the thresholds).
  const double exponent = std::log2(static_cast<double>(max_count)) * (rng() % 1000) / 1000.0;
  c.count = std::max<size_t>(1, static_cast<size_t>(std::exp2(exponent)));
  if (rng() % 4 == 0) c.count = std::min(max_count, size_t{1} << (rng() % 18));
  c.root_draw = rng();
  c.in_place = rng() % 3 == 0;
  c.async = rng() % 4 == 0;
  c.on_split = rng() % 2 == 0;
  c.beside_all_reduce = rng() % 5 == 0;
  c.salt = rng();
  return c;
}

void store(DType dtype, uint8_t* out, size_t i, int64_t v) {
  const size_t size = element_size(dtype);
  uint8_t* at = out + i * size;
  auto put = [&](auto value) { std::memcpy(at, &value, sizeof value); };
  switch (dtype) {
    case DType::f32: return put(static_cast<float>(v));
    case DType::f64: return put(static_cast<double>(v));
    case DType::f16: return put(f32_to_f16(static_cast<float>(v)));
    case DType::bf16: return put(f32_to_bf16(static_cast<float>(v)));
    case DType::i8: return put(static_cast<int8_t>(v));
    case DType::u8: return put(static_cast<uint8_t>(v));
    case DType::i32: return put(static_cast<int32_t>(v));
    case DType::i64: return put(v);
  }
}

// `count` elements of `rank`'s input to a call: small integers, so the sums of a few ranks and
// products of +-1 and 2 are exact in every dtype (integer types wrap alike in any order), an
// average divides an exact sum once, and no result depends on the order the algorithm reduced in.
std::vector<uint8_t> exact_input(const Call& call, int rank, size_t count) {
  std::vector<uint8_t> out(count * element_size(call.dtype));
  const bool is_unsigned = call.dtype == DType::u8;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = mix64(call.salt ^ mix64(static_cast<uint64_t>(rank) * 1000003 + i));
    int64_t v = is_unsigned ? static_cast<int64_t>(h % 4) : static_cast<int64_t>(h % 7) - 3;
    if (call.op == ReduceOp::prod && reduces(call.kind)) {
      v = h % 11 == 0 ? 2 : 1;
      if (!is_unsigned && (h >> 8) % 2 == 1) v = -v;
    }
    store(call.dtype, out.data(), i, v);
  }
  return out;
}

std::vector<uint8_t> slice(const std::vector<uint8_t>& v, DType dtype, size_t begin, size_t count) {
  const size_t size = element_size(dtype);
  return {v.begin() + begin * size, v.begin() + (begin + count) * size};
}

// What runs a call and checks its result, on the communicator `comm`.
class CallChecker {
 public:
  CallChecker(Communicator& comm, const Call& call) : comm_(comm), call_(call) {}

  void run() {
    const int n = comm_.size(), me = comm_.rank();
    const int root = static_cast<int>(call_.root_draw % n);
    const DType dt = call_.dtype;
    const size_t count = call_.count, size = element_size(dt);
    std::vector<std::vector<uint8_t>> inputs;  // every rank's whole send buffer
    const bool blocks = call_.kind == Kind::reduce_scatter || call_.kind == Kind::all_to_all ||
                        call_.kind == Kind::scatter;
    for (int r = 0; r < n; ++r) inputs.push_back(exact_input(call_, r, blocks ? count * n : count));
    std::vector<uint8_t> send = inputs[me];
    const bool gathers = call_.kind == Kind::all_gather || call_.kind == Kind::gather ||
                         call_.kind == Kind::all_to_all;
    std::vector<uint8_t> recv((gathers ? count * n : count) * size, 0xCD);
    switch (call_.kind) {
      case Kind::all_reduce:
      case Kind::reduce: {
        uint8_t* out = call_.in_place ? send.data() : recv.data();
        if (call_.kind == Kind::all_reduce) {
          if (call_.async)
            comm_.all_reduce_async(send.data(), out, count, dt, call_.op).wait();
          else
            comm_.all_reduce(send.data(), out, count, dt, call_.op);
        } else {
          if (call_.async)
            comm_.reduce_async(send.data(), out, count, dt, call_.op, root).wait();
          else
            comm_.reduce(send.data(), out, count, dt, call_.op, root);
        }
        if (call_.kind == Kind::all_reduce || me == root)
          expect(out, reference_reduce(dt, call_.op, inputs, 0, count), count);
        return;
      }
      case Kind::broadcast: {
        uint8_t* out = call_.in_place ? send.data() : recv.data();
        if (call_.async)
          comm_.broadcast_async(send.data(), out, count, dt, root).wait();
        else
          comm_.broadcast(send.data(), out, count, dt, root);
        return expect(out, inputs[root], count);
      }
      case Kind::all_gather: {
        const void* in = send.data();
        if (call_.in_place) {
          std::memcpy(recv.data() + me * count * size, send.data(), count * size);
          in = recv.data() + me * count * size;
        }
        if (call_.async)
          comm_.all_gather_async(in, recv.data(), count, dt).wait();
        else
          comm_.all_gather(in, recv.data(), count, dt);
        for (int r = 0; r < n; ++r) expect(recv.data() + r * count * size, inputs[r], count);
        return;
      }
      case Kind::reduce_scatter: {
        uint8_t* out = call_.in_place ? send.data() + me * count * size : recv.data();
        if (call_.async)
          comm_.reduce_scatter_async(send.data(), out, count, dt, call_.op).wait();
        else
          comm_.reduce_scatter(send.data(), out, count, dt, call_.op);
        return expect(out, reference_reduce(dt, call_.op, inputs, me * count, count), count);
      }
      case Kind::all_to_all: {
        if (call_.async)
          comm_.all_to_all_async(send.data(), recv.data(), count, dt).wait();
        else
          comm_.all_to_all(send.data(), recv.data(), count, dt);
        for (int r = 0; r < n; ++r)
          expect(recv.data() + r * count * size, slice(inputs[r], dt, me * count, count), count);
        return;
      }
      case Kind::gather: {
        if (call_.async)
          comm_.gather_async(send.data(), recv.data(), count, dt, root).wait();
        else
          comm_.gather(send.data(), recv.data(), count, dt, root);
        if (me == root)
          for (int r = 0; r < n; ++r) expect(recv.data() + r * count * size, inputs[r], count);
        return;
      }
      case Kind::scatter: {
        if (call_.async)
          comm_.scatter_async(send.data(), recv.data(), count, dt, root).wait();
        else
          comm_.scatter(send.data(), recv.data(), count, dt, root);
        return expect(recv.data(), slice(inputs[root], dt, me * count, count), count);
      }
      case Kind::ring_shift: {
        if (n < 2) return;
        const int k = 1 + static_cast<int>(call_.root_draw % (n - 1));
        Work received = comm_.recv_async(recv.data(), count, dt, (me - k + n) % n);
        Work sent = comm_.send_async(send.data(), count, dt, (me + k) % n);
        sent.wait();
        received.wait();
        return expect(recv.data(), inputs[(me - k + n) % n], count);
      }
      case Kind::barrier:
        if (call_.async)
          comm_.barrier_async().wait();
        else
          comm_.barrier();
        return;
      case Kind::split: return;  // the caller's
    }
  }

 private:
  void expect(const uint8_t* got, const std::vector<uint8_t>& want, size_t count) {
    const std::string diff = compare_elements(call_.dtype, got, want.data(), count);
    TPF_CHILD_CHECK(diff.empty(), call_.describe(comm_.rank()) + ": " + diff);
  }

  Communicator& comm_;
  const Call& call_;
};

// The all_reduce beside a call: i32 sums of small integers on the parent communicator.
class BesideAllReduce {
 public:
  BesideAllReduce(Communicator& world, const Call& call)
      : call_{Kind::all_reduce, DType::i32, ReduceOp::sum, call.count, 0, false, true, false, false,
              mix64(call.salt)} {
    for (int r = 0; r < world.size(); ++r) inputs_.push_back(exact_input(call_, r, call_.count));
    out_.resize(inputs_[0].size());
    work_ = world.all_reduce_async(inputs_[world.rank()].data(), out_.data(), call_.count,
                                   DType::i32, ReduceOp::sum);
  }
  void wait_and_check() {
    work_.wait();
    const std::vector<uint8_t> want =
        reference_reduce(DType::i32, ReduceOp::sum, inputs_, 0, call_.count);
    const std::string diff = compare_elements(DType::i32, out_.data(), want.data(), call_.count);
    TPF_CHILD_CHECK(diff.empty(), "the all_reduce beside a call: " + diff);
  }

 private:
  Call call_;
  std::vector<std::vector<uint8_t>> inputs_;
  std::vector<uint8_t> out_;
  Work work_;
};

// A split alike on every rank: up to 3 colors from a hash of the rank, keys that reorder.
Communicator split_by(Communicator& world, const Call& call) {
  const uint64_t rank = static_cast<uint64_t>(world.rank());
  const int colors = 1 + static_cast<int>(call.salt % 3);
  return world.split(static_cast<int>(mix64(rank ^ call.salt) % colors),
                     static_cast<int>(mix64(rank * 3 + call.salt) % 100));
}

// Runs `calls` calls drawn from `seed` on `world`; `change`, if given, sees each call (and its
// index) after it is drawn and may alter it on this rank only: every call is drawn alike on every
// rank first, so the ranks' sequences stay aligned after a change.
void run_sequence(Communicator& world, uint64_t seed, int calls, size_t max_count,
                  const std::function<void(int, Call&)>& change = nullptr) {
  std::mt19937_64 rng(seed);
  Communicator split;
  for (int i = 0; i < calls; ++i) {
    Call call = draw(rng, max_count);
    if (change) change(i, call);
    if (call.kind == Kind::split) {
      split = split_by(world, call);
      continue;
    }
    Communicator& comm = call.on_split && split.valid() ? split : world;
    std::optional<BesideAllReduce> beside;
    if (call.beside_all_reduce) beside.emplace(world, call);
    CallChecker(comm, call).run();
    if (beside) beside->wait_and_check();
  }
}

int seeds_per_layout(int ci_default) {
  const char* env = ::getenv("TPF_TEST_RANDOM_SEEDS");
  return env != nullptr ? std::max(1, std::atoi(env)) : ci_default;
}

struct Layout {
  const char* name;
  HostKeys keys;
};
const Layout kLayouts[] = {
    {"two hosts of one", {"host-a", "host-b"}},
    {"two hosts of two", {"host-a", "host-a", "host-b", "host-b"}},
    {"three uneven interleaved hosts", {"host-a", "host-b", "host-a", "host-c", "host-b"}},
    {"four hosts of one", {"host-a", "host-b", "host-c", "host-d"}},
};

// The link's speed the cost model assumes, by seed: 1 Gb/s moves small and mid sizes to the
// tree, halving-doubling and pipelined forms; 100 Gb/s (the default) keeps them in one round.
const char* link_gbps(uint64_t seed) { return seed % 2 == 0 ? "0.125" : "12.5"; }

TEST(RandomCallsAcrossHosts, SeededSequencesMatchTheSerialReference) {
  const int seeds = seeds_per_layout(3);
  for (const Layout& layout : kLayouts) {
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
      const auto protocol =
          seed % 3 == 2 ? transport::NetProtocol::put : transport::NetProtocol::tag;
      SCOPED_TRACE(std::string(layout.name) + ", seed " + std::to_string(seed) + ", " +
                   transport::net_protocol_name(protocol) + ", TPF_NET_GBPS=" + link_gbps(seed));
      expect_all_ok(run_on_hosts(
          layout.keys, [&](Communicator& world) { run_sequence(world, seed, 30, 1 << 17); },
          protocol, [&](int) { ::setenv("TPF_NET_GBPS", link_gbps(seed), 1); }));
    }
  }
}

// One rank's call changed in a field that matters to it; the change a rank makes is never seen by
// the fields its host's steps show alone (the last rank of each layout is not its host's leader
// where its host has two).
struct Change {
  const char* name;
  Kind kind;  // the changed call's
  std::function<void(Call&)> apply;
};

TEST(RandomCallsAcrossHosts, OneRanksChangedCallIsAMismatchOnEveryRank) {
  const Change changes[] = {
      {"count", Kind::all_gather, [](Call& c) { c.count += 1; }},
      {"count", Kind::reduce_scatter, [](Call& c) { c.count += 2; }},
      {"dtype", Kind::all_reduce,
       [](Call& c) { c.dtype = c.dtype == DType::f32 ? DType::i32 : DType::f32; }},
      {"op", Kind::reduce,
       [](Call& c) { c.op = c.op == ReduceOp::max ? ReduceOp::min : ReduceOp::max; }},
      {"root", Kind::gather, [](Call& c) { c.root_draw += 1; }},
      {"root", Kind::broadcast, [](Call& c) { c.root_draw += 1; }},
      {"kind", Kind::all_to_all, [](Call& c) { c.kind = Kind::all_gather; }},
      {"kind", Kind::scatter, [](Call& c) { c.kind = Kind::gather; }},
  };
  constexpr int kChangedCall = 3;
  const int seeds = seeds_per_layout(2);
  for (const Layout& layout : {kLayouts[1], kLayouts[2]}) {
    const int changed_rank = static_cast<int>(layout.keys.size()) - 1;
    for (const Change& change : changes) {
      for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
        SCOPED_TRACE(std::string(layout.name) + ": rank " + std::to_string(changed_rank) + "'s " +
                     change.name + " in " + kKindNames[static_cast<int>(change.kind)] + ", seed " +
                     std::to_string(seed));
        auto outcomes = run_on_hosts(layout.keys, [&](Communicator& world) {
          const Error e = expect_error("the changed call", [&] {
            run_sequence(world, seed, kChangedCall + 1, 1 << 12, [&](int i, Call& call) {
              if (i != kChangedCall) return;
              call.kind = change.kind;
              call.on_split = false;
              call.beside_all_reduce = false;
              if (world.rank() == changed_rank) change.apply(call);
            });
            world.barrier();
          });
          TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
        });
        expect_all_ok(outcomes);
      }
    }
  }
}

// A rank struck by a fault as it starts a random call of a sequence on the parent communicator
// (every call has it in it): every survivor fails with `code`, naming it as `naming` says,
// whatever call each was in (the async all_reduce beside a call included); none names a rank that
// merely failed because of it. Every rank has made the communicator before the fault: the victim
// can run calls ahead (a small rooted call's sender goes on), and a rank still creating the
// communicator would fail there, outside this body. The victim ends killed either way.
struct Fault {
  const char* name;
  std::function<void(SharedBlock&)> strike;  // what the victim does to itself
  ErrorCode code;
  std::function<std::string(const HostKeys&, int victim)> naming;
  RankSettings settings;
};

void expect_every_survivor_names_the_victim(const Fault& fault) {
  const int seeds = seeds_per_layout(2);
  for (const Layout& layout : {kLayouts[1], kLayouts[2]}) {
    const int ranks = static_cast<int>(layout.keys.size());
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
      const int victim = static_cast<int>(mix64(seed) % ranks);
      const int strike_at = 1 + static_cast<int>(mix64(seed + 1) % 5);
      SCOPED_TRACE(std::string(layout.name) + ": rank " + std::to_string(victim) + " " +
                   fault.name + " at call " + std::to_string(strike_at) + ", seed " +
                   std::to_string(seed));
      SharedBlock shared;  // [0]: survivors done; [1]: the victim's pid
      auto outcomes = run_on_hosts(
          layout.keys,
          [&](Communicator& world) {
            world.barrier();
            const Error e = expect_error("a sequence with a fault", [&] {
              run_sequence(world, seed, strike_at + 1, 1 << 14, [&](int i, Call& call) {
                call.on_split = false;
                if (call.kind == Kind::split) call.kind = Kind::barrier;
                if (i == strike_at && world.rank() == victim) fault.strike(shared);
              });
              world.barrier();
            });
            // The last survivor ends a victim that is still there (stopped).
            if (shared.counter(0).fetch_add(1) + 1 == ranks - 1 && shared.counter(1).load() != 0)
              ::kill(static_cast<pid_t>(shared.counter(1).load()), SIGKILL);
            const std::string what = e.what();
            TPF_CHILD_CHECK(e.code() == fault.code, what);
            TPF_CHILD_CHECK(what.find(fault.naming(layout.keys, victim)) != std::string::npos,
                            what);
          },
          transport::NetProtocol::tag, fault.settings);
      for (const RankOutcome& o : outcomes) {
        if (o.rank == victim) {
          EXPECT_EQ(o.signal, SIGKILL) << o.describe();
        } else {
          EXPECT_TRUE(o.ok()) << o.describe();
        }
      }
    }
  }
}

// Killed (SIGKILL: no goodbye): peer_died, within milliseconds to 2 s (500 random runs before
// this test: 2.2 s at most); bounded by the tests' 30 s deadline.
TEST(RandomCallsAcrossHosts, ARankKilledAtARandomCallIsNamedByEverySurvivor) {
  expect_every_survivor_names_the_victim(
      {"killed",
       [](SharedBlock&) { ::raise(SIGKILL); },
       ErrorCode::peer_died,
       [](const HostKeys&, int victim) { return "rank " + std::to_string(victim); },
       {}});
}

// Stopped (SIGSTOP: UCX sees nothing): named by its watcher's heartbeat after TPF_HOST_LOST_S
// (3 s here), and through the watcher by every survivor, whatever it waits in (shared memory, a
// collective's or a point-to-point transfer over the network), well before the tests' 30 s
// deadline, which would name it differently ("timed out ..."). 40 ad-hoc runs of random
// sequences with splits before this test (11 layouts, TPF_HOST_LOST_S=4) found a root sending
// to the stopped rank that waited out its deadline; that case needs a large rooted call whose
// root is not its host's leader, which these seeds do not reach (30 runs passed without the fix):
// across_hosts_test.cc's ARankWaitingOnAStoppedPeerHearsOfItFromItsHostMate checks it.
TEST(RandomCallsAcrossHosts, ARankStoppedAtARandomCallIsNamedByEverySurvivorsHeartbeat) {
  expect_every_survivor_names_the_victim({"stopped",
                                          [](SharedBlock& shared) {
                                            shared.counter(1).store(::getpid());
                                            ::raise(SIGSTOP);
                                          },
                                          ErrorCode::timeout,
                                          [](const HostKeys& keys, int victim) {
                                            return "rank " + std::to_string(victim) + " (host '" +
                                                   keys[victim] + "') has sent no heartbeat";
                                          },
                                          [](int) { ::setenv("TPF_HOST_LOST_S", "3", 1); }});
}

}  // namespace
}  // namespace tpf::testing
