// The flight recorder (issue 15): exact records, consistency under concurrent writers, the dump
// format read back, dumps of real ranks on a signal and on a mismatch, and `tpf run`'s summary of
// a hung job (a rank that never joins a collective).
#include "comm/flight_recorder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/flight_summary.h"
#include "comm/settings.h"
#include "support/expect_error.h"
#include "support/fake_remote_shell.h"
#include "support/multiproc.h"
#include "support/run_tpf.h"
#include "support/scoped_env.h"
#include "support/scratch_dir.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "transport/ucx_network.h"

namespace tpf::testing {
namespace {

using coll::OpKind;
using detail::FlightDump;
using detail::FlightRecord;
using detail::FlightRecorder;
using detail::FlightState;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

// Every dump in every file of `dir`, in file order.
std::vector<FlightDump> dumps_in(const std::string& dir, size_t* signal_dumps = nullptr) {
  std::vector<FlightDump> out;
  if (signal_dumps) *signal_dumps = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    detail::FlightFile file = detail::parse_flight_file(read_file(entry.path().string()));
    if (signal_dumps) *signal_dumps += file.signal_dumps;
    for (FlightDump& d : file.dumps) out.push_back(std::move(d));
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// What a record should say, without its times.
struct Expected {
  uint64_t id;
  uint64_t sequence;
  OpKind kind;
  DType dtype;
  uint64_t count;
  int peer;
  FlightState state;
  ErrorCode error = ErrorCode::internal;
  // The dump may come before the record ends: another thread (the heartbeat's, taking a peer's
  // failure notice) wrote it while this operation's own wait was still to fail.
  bool or_in_flight = false;
};

std::string describe(const FlightRecord& r) {
  return "id=" + std::to_string(r.id) + " seq=" + std::to_string(r.sequence) + " " +
         coll::op_kind_name(r.kind) + " " + dtype_name(r.dtype) + " x" + std::to_string(r.count) +
         " peer=" + std::to_string(r.peer) + " " + detail::flight_state_name(r.state) +
         (r.state == FlightState::failed ? std::string(" ") + detail::error_code_token(r.error)
                                         : std::string());
}

void expect_records(const std::vector<FlightRecord>& got, const std::vector<Expected>& want,
                    const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < want.size(); ++i) {
    const FlightRecord& r = got[i];
    const Expected& w = want[i];
    const bool state_as_said =
        (r.state == w.state && (w.state != FlightState::failed || r.error == w.error)) ||
        (w.or_in_flight && r.state == FlightState::in_flight);
    const bool same = r.id == w.id && r.sequence == w.sequence && r.kind == w.kind &&
                      r.dtype == w.dtype && r.count == w.count && r.peer == w.peer && state_as_said;
    EXPECT_TRUE(same) << where << ": record " << i << " is " << describe(r);
    EXPECT_GT(r.start_ns, 0) << where << ": record " << i;
    if (r.state == FlightState::in_flight) {
      EXPECT_EQ(r.end_ns, 0) << where << ": record " << i;
    } else {
      EXPECT_GE(r.end_ns, r.start_ns) << where << ": record " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The recorder alone

TEST(FlightRecorder, RecordsSequenceOpAndStateExactlyAndKeepsTheLastN) {
  FlightRecorder rec(4);
  rec.attach("unit", 0, 1, 2);
  auto a = rec.begin(OpKind::barrier, DType::u8, 0, -1, 0);
  rec.end(a, FlightState::completed);
  auto b = rec.begin(OpKind::broadcast, DType::f32, 10, 1, 1);
  rec.end(b, FlightState::completed);
  auto c = rec.begin(OpKind::send, DType::i32, 7, 0, 0);  // a point-to-point message index
  auto d = rec.begin(OpKind::all_reduce, DType::bf16, 5, -1, 2);
  rec.end(d, std::make_exception_ptr(Error(ErrorCode::mismatch, "x")));
  // Collectives first, then sends and receives, each counted in its own ring.
  expect_records(
      rec.snapshot(),
      {{0, 0, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
       {1, 1, OpKind::broadcast, DType::f32, 10, 1, FlightState::completed},
       {2, 2, OpKind::all_reduce, DType::bf16, 5, -1, FlightState::failed, ErrorCode::mismatch},
       {0, 0, OpKind::send, DType::i32, 7, 0, FlightState::in_flight}},
      "four operations");

  auto e = rec.begin(OpKind::recv, DType::f64, 3, 0, 0);
  rec.end(e, FlightState::completed);
  auto f = rec.begin(OpKind::all_gather, DType::i64, 2, -1, 3);
  rec.end(f, std::make_exception_ptr(std::runtime_error("not a tpf::Error")));
  rec.end(c, FlightState::completed);
  expect_records(
      rec.snapshot(),
      {{0, 0, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
       {1, 1, OpKind::broadcast, DType::f32, 10, 1, FlightState::completed},
       {2, 2, OpKind::all_reduce, DType::bf16, 5, -1, FlightState::failed, ErrorCode::mismatch},
       {3, 3, OpKind::all_gather, DType::i64, 2, -1, FlightState::failed, ErrorCode::internal},
       {0, 0, OpKind::send, DType::i32, 7, 0, FlightState::completed},
       {1, 0, OpKind::recv, DType::f64, 3, 0, FlightState::completed}},
      "a full collective ring");

  // Five more collectives push out the oldest; an end() for a record pushed out of the ring must
  // not touch its successor. Likewise for sends and receives.
  std::vector<FlightRecorder::Slot> slots;
  for (uint64_t seq = 4; seq < 8; ++seq)
    slots.push_back(rec.begin(OpKind::barrier, DType::u8, 0, -1, seq));
  auto k = rec.begin(OpKind::reduce, DType::f32, 9, 0, 8);  // takes the slot of seq 4
  for (auto s : slots) rec.end(s, FlightState::completed);
  slots.clear();
  for (uint64_t m = 1; m < 4; ++m) slots.push_back(rec.begin(OpKind::send, DType::u8, m, 1, m));
  auto late = rec.begin(OpKind::recv, DType::u8, 4, 1, 1);  // message ticket 5: pushes out ticket 1
  rec.end(e, FlightState::failed, ErrorCode::timeout);      // ticket 1: ignored
  for (auto s : slots) rec.end(s, FlightState::completed);
  expect_records(rec.snapshot(),
                 {{5, 5, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {6, 6, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {7, 7, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {8, 8, OpKind::reduce, DType::f32, 9, 0, FlightState::in_flight},
                  {2, 1, OpKind::send, DType::u8, 1, 1, FlightState::completed},
                  {3, 2, OpKind::send, DType::u8, 2, 1, FlightState::completed},
                  {4, 3, OpKind::send, DType::u8, 3, 1, FlightState::completed},
                  {5, 1, OpKind::recv, DType::u8, 4, 1, FlightState::in_flight}},
                 "after wrapping around");
  rec.end(k, FlightState::completed);
  rec.end(late, FlightState::completed);
}

TEST(FlightRecorder, DumpTextReadsBackToTheSameRecords) {
  FlightRecorder rec(8);
  rec.attach("odd name=with spaces", 3, 2, 4);
  rec.end(rec.begin(OpKind::all_to_all, DType::f16, 123456789012ull, -1, 0),
          FlightState::completed);
  rec.begin(OpKind::gather, DType::u8, 1, 3, 1);
  const std::string text = rec.format("signal");
  detail::FlightFile file = detail::parse_flight_file(text);
  ASSERT_EQ(file.dumps.size(), 1u) << text;
  const FlightDump& d = file.dumps[0];
  EXPECT_EQ(d.comm, "odd_name_with_spaces") << text;
  EXPECT_EQ(d.generation, 3u);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.size, 4);
  EXPECT_EQ(d.pid, ::getpid());
  EXPECT_EQ(d.reason, "signal");
  EXPECT_EQ(d.records, rec.snapshot()) << text;

  // A dump cut off before its end line (the process died while writing) is left out.
  detail::FlightFile cut = detail::parse_flight_file(text.substr(0, text.rfind("# tpf")));
  EXPECT_TRUE(cut.dumps.empty());
}

// UCX's error lines that tpf took in instead of printing them (transport/ucx_network.h) end the
// dump, before its end line; readers skip them, so the records read back the same.
TEST(FlightRecorder, ADumpEndsWithUcxsLatestErrorLinesWhichReadersSkip) {
  FlightRecorder rec(8);
  rec.attach("w", 0, 0, 2);
  rec.end(rec.begin(OpKind::barrier, DType::u8, 0, -1, 0), FlightState::completed);
  const std::string said =
      "tcp_cm.c:736 tcp_ep 0x1: connection establishment for socket fd 18 "
      "was unsuccessful (a test's line)";
  transport::keep_ucx_error(said);
  const std::string text = rec.format("signal");
  EXPECT_NE(text.find("\nucx " + said + "\n# tpf-flight-recorder end "), std::string::npos) << text;
  const detail::FlightFile file = detail::parse_flight_file(text);
  ASSERT_EQ(file.dumps.size(), 1u) << text;
  EXPECT_EQ(file.dumps[0].records, rec.snapshot()) << text;
  for (size_t i = 0; i <= transport::kKeptUcxErrors; ++i)
    transport::keep_ucx_error("line " + std::to_string(i));
  const std::vector<std::string> kept = transport::recent_ucx_errors();
  ASSERT_EQ(kept.size(), transport::kKeptUcxErrors) << "the latest are kept, no more";
  EXPECT_EQ(kept.back(), "line " + std::to_string(transport::kKeptUcxErrors));
}

// A split's dump carries its ranks' job ranks, as runs of a common step; a world's carries none.
TEST(FlightRecorder, ASplitsDumpCarriesItsJobRanks) {
  FlightRecorder split(8);
  split.attach("world.s0c1", 0, 1, 4, {1, 3, 5, 7});
  const std::string text = split.format("signal");
  EXPECT_NE(text.find(" job_ranks=1-7/2 "), std::string::npos) << text;
  detail::FlightFile file = detail::parse_flight_file(text);
  ASSERT_EQ(file.dumps.size(), 1u) << text;
  EXPECT_EQ(file.dumps[0].job_ranks, (std::vector<int>{1, 3, 5, 7}));

  FlightRecorder world(8);
  world.attach("world", 0, 1, 3, {0, 1, 2});  // the same numbers: nothing to say
  EXPECT_EQ(world.format("signal").find("job_ranks="), std::string::npos);
}

TEST(FlightRecorder, RankRunsReadBackAndMalformedListsAreRefused) {
  const std::vector<std::pair<std::vector<int>, std::string>> cases = {
      {{}, ""},
      {{5}, "5"},
      {{0, 1, 2, 3}, "0-3"},
      {{0, 8, 16, 24}, "0-24/8"},
      {{4, 5}, "4-5"},
      {{3, 9}, "3,9"},  // two of a step > 1 are plainer as two
      {{0, 1, 2, 3, 8, 12, 16, 7, 2}, "0-3,8-16/4,7,2"},
  };
  for (const auto& [ranks, text] : cases) {
    EXPECT_EQ(detail::encode_rank_runs(ranks), text);
    EXPECT_EQ(detail::decode_rank_runs(text, 16), ranks) << text;
  }
  for (const std::string bad :
       {"x", "1,", ",1", "3-1", "0-5/2", "0-4/0", "-1", "1--2", "0-3/", "1 2", "0-2147483647"}) {
    EXPECT_EQ(detail::decode_rank_runs(bad, 16), std::nullopt) << bad;
  }
  EXPECT_EQ(detail::decode_rank_runs("0-16", 16), std::nullopt) << "17 ranks where 16 fit";
}

// Until `done` or 30 s (a bound, not a wait): yields the core between looks.
template <class Done>
bool within_bound(Done&& done) {
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// A communicator's failure dumps once, and another failing call (another thread: the heartbeat's
// and a collective's take the same notice) returns only once that dump is written, or the
// program may exit mid-write (CI lost a rank's dump so, 2026-12-05). The dump file here is a FIFO
// the test keeps full, so the first caller sleeps in its write, holding the dump's lock; the
// second must then sleep too, not return, until the test drains the FIFO.
TEST(FlightRecorder, ASecondFailureReturnsOnlyOnceTheFirstOnesDumpIsWritten) {
  // Attached before the directory is set: the process's first recorder writes an "armed" line
  // there.
  FlightRecorder rec(8);
  rec.attach("world", 0, 0, 2);
  ScratchDir dir;
  ScopedEnv at("TPF_FLIGHT_RECORDER_DIR", dir.path().c_str());
  ScopedEnv job("TPF_JOB_ID", "fifo");
  ScopedEnv rank("TPF_RANK", "0");
  const std::string path = dir / ("flight-fifo-rank0-pid" + std::to_string(::getpid()) + ".txt");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  // Read and write, so that opening does not wait for a writer and the dump's open finds a reader.
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::fcntl(fd, F_SETPIPE_SZ, 4096);
  size_t filler = 0;
  const std::string junk(512, '#');
  for (ssize_t n; (n = ::write(fd, junk.data(), junk.size())) > 0;)
    filler += static_cast<size_t>(n);
  ASSERT_GT(filler, 0u);

  struct Caller {
    std::atomic<pid_t> tid{0};
    std::atomic<bool> returned{false};
    bool asleep() const { return tid != 0 && process_state(tid) == 'S'; }
  } first, second;
  auto fail_as = [&rec](Caller& caller, ErrorCode code) {
    return std::thread([&rec, &caller, code] {
      caller.tid = static_cast<pid_t>(::syscall(SYS_gettid));
      rec.dump_on_failure(code);
      caller.returned = true;
    });
  };
  std::thread first_thread = fail_as(first, ErrorCode::timeout);
  EXPECT_TRUE(within_bound([&] { return first.asleep(); }));  // in its write, holding the lock
  std::thread second_thread = fail_as(second, ErrorCode::peer_died);
  EXPECT_TRUE(within_bound([&] { return second.returned || second.asleep(); }));
  EXPECT_FALSE(second.returned) << "returned while the first failure's dump was being written";
  std::string text;
  char buffer[4096];
  const bool drained = within_bound([&] {
    const bool written = first.returned;  // before the read: nothing comes after it
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;)
      text.append(buffer, static_cast<size_t>(n));
    return written;
  });
  ::close(fd);
  first_thread.join();
  second_thread.join();
  ASSERT_TRUE(drained);
  ASSERT_GE(text.size(), filler);
  const detail::FlightFile file = detail::parse_flight_file(text.substr(filler));
  ASSERT_EQ(file.dumps.size(), 1u) << text;
  EXPECT_EQ(file.dumps[0].reason, "timeout");
}

TEST(FlightRecorder, RecordsStayConsistentUnderConcurrentWritersAndReaders) {
  // Threads 0-2 record sends and receives (any number of writers), thread 3 collectives (one
  // writer); each records count = 3 * sequence + thread, with its number as peer and dtype, so
  // a record mixing two operations shows. The rings are small so that slots are reused all the
  // time while this thread reads them.
  FlightRecorder rec(8);
  rec.attach("stress", 0, 0, 1);
  constexpr int kThreads = 4;
  constexpr uint64_t kOps = 20000;
  auto kind_of = [](int t) {
    return t == 3 ? OpKind::all_reduce : t == 0 ? OpKind::send : OpKind::recv;
  };
  std::atomic<bool> go{false};
  std::atomic<int> finished{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (uint64_t s = 0; s < kOps; ++s) {
        auto slot =
            rec.begin(kind_of(t), static_cast<DType>(t), 3 * s + static_cast<uint64_t>(t), t, s);
        rec.end(slot, s % 2 ? FlightState::completed : FlightState::failed, ErrorCode::timeout);
      }
      finished.fetch_add(1);
    });
  }
  go.store(true);
  size_t checked = 0;
  std::string bad;
  while (finished.load() < kThreads || checked == 0) {
    for (const FlightRecord& r : rec.snapshot()) {
      ++checked;
      const int t = r.peer;
      const bool ok =
          t >= 0 && t < kThreads && static_cast<int>(r.dtype) == t && r.kind == kind_of(t) &&
          r.count == 3 * r.sequence + static_cast<uint64_t>(t) && (t != 3 || r.id == r.sequence) &&
          (r.state == FlightState::in_flight ||
           r.state == (r.sequence % 2 ? FlightState::completed : FlightState::failed));
      if (!ok && bad.empty()) bad = describe(r);
    }
  }
  for (auto& w : writers) w.join();
  EXPECT_TRUE(bad.empty()) << "a torn record: " << bad;
  EXPECT_GT(checked, 0u);
  const std::vector<FlightRecord> last = rec.snapshot();
  ASSERT_EQ(last.size(), 16u);
  EXPECT_EQ(last[7].id, kOps - 1);  // the collective ring ends with the last collective
  EXPECT_EQ(last[7].state, FlightState::completed);
}

TEST(FlightRecorder, SettingsAreCheckedAndSizeZeroTurnsItOff) {
  ::setenv("TPF_FLIGHT_RECORDER_SIZE", "sixty", 1);
  try {
    detail::resolve_comm_settings();
    ADD_FAILURE() << "TPF_FLIGHT_RECORDER_SIZE=sixty was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TPF_FLIGHT_RECORDER_SIZE"), std::string::npos)
        << e.what();
  }
  ::setenv("TPF_FLIGHT_RECORDER_SIZE", "0", 1);
  EXPECT_EQ(detail::resolve_comm_settings().flight_recorder_size, 0u);
  ::unsetenv("TPF_FLIGHT_RECORDER_SIZE");
  EXPECT_EQ(detail::resolve_comm_settings().flight_recorder_size, FlightRecorder::kDefaultCapacity);
  ::setenv("TPF_FLIGHT_RECORDER_SIGNAL", "USR3", 1);
  try {
    FlightRecorder bad(4);
    ADD_FAILURE() << "TPF_FLIGHT_RECORDER_SIGNAL=USR3 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TPF_FLIGHT_RECORDER_SIGNAL='USR3'"), std::string::npos)
        << e.what();
  }
  ::unsetenv("TPF_FLIGHT_RECORDER_SIGNAL");
  ::setenv("TPF_FLIGHT_RECORDER_STORE", "yes", 1);
  try {
    FlightRecorder bad(4);
    ADD_FAILURE() << "TPF_FLIGHT_RECORDER_STORE=yes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TPF_FLIGHT_RECORDER_STORE='yes' should be 1"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("TPF_FLIGHT_RECORDER_STORE");
  FlightRecorder off(0);
  auto slot = off.begin(OpKind::barrier, DType::u8, 0, -1, 0);
  off.end(slot, FlightState::completed);
  EXPECT_TRUE(off.snapshot().empty());
}

// ---------------------------------------------------------------------------------------------
// The summary

FlightRecord record(uint64_t id, uint64_t seq, OpKind kind, FlightState state, int peer = -1,
                    ErrorCode error = ErrorCode::internal) {
  FlightRecord r;
  r.id = id;
  r.sequence = seq;
  r.kind = kind;
  r.dtype = DType::f32;
  r.count = 4;
  r.peer = peer;
  r.state = state;
  r.error = error;
  r.start_ns = 1000;
  r.end_ns = state == FlightState::in_flight ? 0 : 2000;
  return r;
}

FlightDump dump(int rank, int size, std::vector<FlightRecord> records, std::string comm = "world") {
  FlightDump d;
  d.comm = std::move(comm);
  d.rank = rank;
  d.size = size;
  d.pid = 100 + rank;
  d.reason = "signal";
  d.now_ns = 5000;
  d.records = std::move(records);
  return d;
}

TEST(FlightSummary, NamesTheRankThatHasNotStartedTheLowestSequence) {
  const auto done = FlightState::completed;
  std::vector<FlightDump> dumps = {
      dump(0, 4,
           {record(0, 0, OpKind::barrier, done),
            record(1, 1, OpKind::all_reduce, FlightState::failed, -1, ErrorCode::timeout)}),
      dump(1, 4,
           {record(0, 0, OpKind::barrier, done),
            record(1, 1, OpKind::all_reduce, FlightState::in_flight)}),
      dump(2, 4, {record(0, 0, OpKind::barrier, done)}),
      // rank 3 left no dump
  };
  const std::string s = joined(detail::summarize_flight_dumps(dumps));
  EXPECT_NE(s.find("communicator 'world' (generation 0, 4 ranks, 3 dumped)"), std::string::npos)
      << s;
  EXPECT_NE(s.find("rank 0 (pid 100, dumped on signal): last started all_reduce seq 1 (failed: "
                   "timeout after 0.00 s); last completed barrier seq 0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("rank 2 (pid 102, dumped on signal): last started barrier seq 0 (completed)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("everyone waits for rank 2: not started collective seq 1 (rank 0 is in "
                   "all_reduce seq 1, rank 1 is in all_reduce seq 1)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("rank 3: no dump"), std::string::npos) << s;
  EXPECT_NE(s.find("no dump from rank 3"), std::string::npos) << s;
}

// A split's summary names its ranks by the job's numbers too, as its errors do.
TEST(FlightSummary, NamesASplitsRanksByTheJobsNumbersToo) {
  std::vector<FlightDump> dumps = {
      dump(0, 3, {record(0, 0, OpKind::all_reduce, FlightState::in_flight)}, "world.s0c1"),
      dump(1, 3, {record(0, 3, OpKind::recv, FlightState::in_flight, 0)}, "world.s0c1"),
  };
  for (FlightDump& d : dumps) d.job_ranks = {4, 9, 14};
  const std::string s = joined(detail::summarize_flight_dumps(dumps));
  EXPECT_NE(s.find("rank 1 (job rank 9, pid 101, dumped on signal): no collective recorded; recv "
                   "#3 from rank 0 (job rank 4) in flight"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("everyone waits for rank 1 (job rank 9): not started collective seq 0 (rank 0 "
                   "(job rank 4) is in all_reduce seq 0)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("rank 2 (job rank 14): no dump"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 1 (job rank 9) waits for rank 0 (job rank 4): recv #3 from rank 0 (job "
                   "rank 4), whose send rank 0 has not posted (its newest: none recorded)"),
            std::string::npos)
      << s;
}

// A rank tpf run found lost and ended left no dump for that reason, and nobody waits for it any
// more: said so, by the job's number (here in the world and in a split of job ranks 4, 9, 14).
TEST(FlightSummary, ARankFoundLostAndEndedIsSaidSoAndNotWaitedFor) {
  const auto done = FlightState::completed;
  std::vector<FlightDump> dumps = {
      dump(0, 4, {record(0, 0, OpKind::barrier, done)}),
      dump(1, 4, {record(0, 0, OpKind::barrier, done)}),
      dump(0, 3, {record(0, 0, OpKind::barrier, done)}, "world.s0c1"),
  };
  dumps.back().job_ranks = {4, 9, 14};
  const std::string s = joined(detail::summarize_flight_dumps(dumps, {3, 14}));
  EXPECT_NE(s.find("  rank 2: no dump\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  rank 3: no dump (found lost and ended)"), std::string::npos) << s;
  EXPECT_NE(s.find("no dump from rank 2 (exited without one"), std::string::npos) << s;
  EXPECT_NE(s.find("  rank 1 (job rank 9): no dump\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  rank 2 (job rank 14): no dump (found lost and ended)"), std::string::npos)
      << s;
  EXPECT_NE(s.find("no dump from rank 1 (job rank 9) (exited"), std::string::npos) << s;
  EXPECT_EQ(s.find("no dump from rank 3"), std::string::npos) << s;
  EXPECT_EQ(s.find("job rank 14) (exited"), std::string::npos) << s;
}

TEST(FlightSummary, SaysWhenRanksCalledDifferentCollectivesAndWhichSendIsMissing) {
  std::vector<FlightDump> dumps = {
      dump(0, 2, {record(0, 0, OpKind::all_reduce, FlightState::failed, -1, ErrorCode::mismatch)}),
      dump(1, 2, {record(0, 0, OpKind::all_gather, FlightState::failed, -1, ErrorCode::mismatch)}),
      dump(0, 2, {record(0, 2, OpKind::recv, FlightState::in_flight, 1)}, "pair"),
      dump(1, 2,
           {record(0, 0, OpKind::send, FlightState::completed, 0),
            record(1, 1, OpKind::send, FlightState::completed, 0)},
           "pair"),
  };
  const std::string s = joined(detail::summarize_flight_dumps(dumps));
  EXPECT_NE(s.find("every dumped rank has reached collective seq 0: rank 0 all_reduce(f32 x 4), "
                   "rank 1 all_gather(f32 x 4); they called different collectives"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("rank 0 waits for rank 1: recv #2 from rank 1, whose send rank 1 has not "
                   "posted (its newest: #1)"),
            std::string::npos)
      << s;
}

// ---------------------------------------------------------------------------------------------
// Real ranks

TEST(FlightRecorderRanks, TheDumpSignalDumpsABlockedRank) {
  ScratchDir dir;
  const std::string where = dir / "";
  SharedBlock shared;
  auto& calling = shared.counter(0);
  auto& pid1 = shared.counter(1);
  auto& done = shared.counter(2);
  RunOptions options;
  options.comm_options.timeout = milliseconds(30000);
  expect_all_ok(run_ranks_raw(
      2,
      [&](const RankContext& ctx) {
        ::setenv("TPF_FLIGHT_RECORDER_DIR", where.c_str(), 1);
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        for (int i = 0; i < 3; ++i) comm.barrier();
        std::vector<float> a(1000, 1.0f), b(1000);
        if (comm.rank() == 1) {
          pid1.store(::getpid());
          calling.store(1);
          comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum);
          TPF_CHILD_CHECK(b[0] == 2.0f, "all_reduce after the dump gave " + std::to_string(b[0]));
          return;
        }
        // Rank 0 joins only once rank 1's dump shows it blocked in the all_reduce. Each signal
        // gives one dump; signal again if the dump came before the all_reduce began.
        TPF_CHILD_CHECK(wait_until([&] { return calling.load() == 1; }, 20s), "rank 1 not ready");
        const auto pid = static_cast<pid_t>(pid1.load());
        bool seen = false;
        for (size_t asked = 1; asked <= 50 && !seen; ++asked) {
          TPF_CHILD_CHECK(::kill(pid, SIGUSR2) == 0, "kill: " + std::to_string(errno));
          size_t answered = 0;
          std::vector<FlightDump> dumps;
          TPF_CHILD_CHECK(wait_until(
                              [&] {
                                dumps = dumps_in(where, &answered);
                                return answered >= asked;
                              },
                              20s),
                          "rank 1 did not answer the dump signal");
          const auto& last = dumps.back().records.back();
          seen = last.kind == OpKind::all_reduce && last.state == FlightState::in_flight;
        }
        TPF_CHILD_CHECK(seen, "rank 1's dumps never showed the all_reduce in flight");
        comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum);
        done.store(1);
      },
      options));
  ASSERT_EQ(done.load(), 1);
  // Rank 0 was never asked and did not fail: only rank 1 dumped, and only on the signal.
  std::vector<FlightDump> dumps = dumps_in(where);
  ASSERT_FALSE(dumps.empty());
  const FlightDump& last = dumps.back();
  for (const FlightDump& d : dumps) {
    EXPECT_EQ(d.rank, 1);
    EXPECT_EQ(d.reason, "signal");
    EXPECT_EQ(d.comm, "world");
  }
  EXPECT_EQ(last.size, 2);
  expect_records(last.records,
                 {{0, 0, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {1, 1, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {2, 2, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                  {3, 3, OpKind::all_reduce, DType::f32, 1000, -1, FlightState::in_flight}},
                 "rank 1's dump while blocked");
}

// Runs `ranks` ranks (30 s deadline) that dump into a scratch directory, each making its world
// communicator (after `before`, if any) and handing it to `body`; returns every dump they wrote.
std::vector<FlightDump> dumps_of_ranks(
    int ranks, const std::function<void(const RankContext&, Communicator&)>& body,
    const std::function<void(const RankContext&)>& before = {}) {
  ScratchDir dir;
  const std::string where = dir / "";
  RunOptions options;
  options.comm_options.timeout = milliseconds(30000);
  expect_all_ok(run_ranks_raw(
      ranks,
      [&](const RankContext& ctx) {
        ::setenv("TPF_FLIGHT_RECORDER_DIR", where.c_str(), 1);
        if (before) before(ctx);
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        body(ctx, comm);
      },
      options));
  return dumps_in(where);
}

// A receive from `peer`, which never sends: it times out after 1 s.
void expect_receive_to_time_out(Communicator& comm, int peer) {
  int32_t value = 0;
  const Error e = expect_error("a receive nobody sends", [&] {
    comm.recv(&value, 1, DType::i32, peer, CallOptions{.timeout = milliseconds(1000)});
  });
  TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
}

TEST(FlightRecorderRanks, AMismatchDumpsOnEveryRank) {
  std::vector<FlightDump> dumps = dumps_of_ranks(3, [](const RankContext&, Communicator& comm) {
    comm.barrier();
    int32_t one = 1, sum = 0;
    comm.all_reduce(&one, &sum, 1, DType::i32, ReduceOp::sum);
    std::vector<float> a(16, 1.0f), b(48);
    try {
      if (comm.rank() == 2) {
        comm.all_gather(a.data(), b.data(), 16, DType::f32);
      } else {
        comm.all_reduce(a.data(), b.data(), 16, DType::f32, ReduceOp::sum);
      }
      TPF_CHILD_CHECK(false, "mismatched collectives returned normally");
    } catch (const Error& e) {
      TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch,
                      std::string("expected Error(mismatch), got ") + e.what());
    }
  });
  ASSERT_EQ(dumps.size(), 3u) << "one dump per rank, on the first failure only";
  std::vector<bool> seen(3, false);
  for (const FlightDump& d : dumps) {
    ASSERT_TRUE(d.rank >= 0 && d.rank < 3) << d.rank;
    seen[static_cast<size_t>(d.rank)] = true;
    EXPECT_EQ(d.reason, "mismatch") << "rank " << d.rank;
    const bool gatherer = d.rank == 2;
    expect_records(d.records,
                   {{0, 0, OpKind::barrier, DType::u8, 0, -1, FlightState::completed},
                    {1, 1, OpKind::all_reduce, DType::i32, 1, -1, FlightState::completed},
                    {2, 2, gatherer ? OpKind::all_gather : OpKind::all_reduce, DType::f32, 16, -1,
                     FlightState::failed, ErrorCode::mismatch}},
                   "rank " + std::to_string(d.rank));
  }
  EXPECT_EQ(seen, std::vector<bool>(3, true));
  const std::string s = joined(detail::summarize_flight_dumps(dumps));
  EXPECT_NE(s.find("they called different collectives"), std::string::npos) << s;
}

// Sends and receives are recorded by the communicator's numbers wherever they go: on two hosts
// of two ranks (host a: 0, 1; b: 2, 3), those across hosts were not recorded at all, and those
// inside a host bore the host's own numbering (rank 2's receive from rank 3 read "peer=1").
// Then ranks 0 and 2 each receive what the other never sends, and both dump on the timeout: the
// first to time out, with its receive failed; the other as its own receive times out or as the
// first's failure notice reaches its heartbeat thread, its receive then still in flight (both
// happen: the test required the first until 2026-12-06, and failed once so in a full run).
TEST(FlightRecorderRanks, SendsAndReceivesAcrossAndInsideHostsAreRecordedByTheCommunicatorsRanks) {
  std::vector<FlightDump> dumps = dumps_of_ranks(
      4,
      [](const RankContext& ctx, Communicator& comm) {
        int32_t value = ctx.rank;
        switch (ctx.rank) {
          case 0:
            comm.send(&value, 1, DType::i32, 2);
            comm.recv(&value, 1, DType::i32, 1);
            break;
          case 1: comm.send(&value, 1, DType::i32, 0); return;
          case 2:
            comm.recv(&value, 1, DType::i32, 0);
            comm.recv(&value, 1, DType::i32, 3);
            break;
          default: comm.send(&value, 1, DType::i32, 2); return;
        }
        expect_receive_to_time_out(comm, 2 - ctx.rank);
      },
      [](const RankContext& ctx) {
        ::setenv("TPF_NODE_ID", ctx.rank < 2 ? "host-a" : "host-b", 1);
      });
  ASSERT_EQ(dumps.size(), 2u) << "ranks 0 and 2 dump, once each";
  for (const FlightDump& d : dumps) {
    EXPECT_EQ(d.reason, "timeout") << "rank " << d.rank;
    if (d.rank == 0) {
      expect_records(
          d.records,
          {{0, 0, OpKind::send, DType::i32, 1, 2, FlightState::completed},
           {1, 0, OpKind::recv, DType::i32, 1, 1, FlightState::completed},
           {2, 0, OpKind::recv, DType::i32, 1, 2, FlightState::failed, ErrorCode::timeout,
            /*or_in_flight=*/true}},
          "rank 0");
    } else {
      ASSERT_EQ(d.rank, 2);
      expect_records(
          d.records,
          {{0, 0, OpKind::recv, DType::i32, 1, 0, FlightState::completed},
           {1, 0, OpKind::recv, DType::i32, 1, 3, FlightState::completed},
           {2, 1, OpKind::recv, DType::i32, 1, 0, FlightState::failed, ErrorCode::timeout,
            /*or_in_flight=*/true}},
          "rank 2");
    }
  }
}

// A split's dumps, and the summary made of them, name its ranks by the job's numbers too: four
// ranks split by parity, and in each half split rank 1 waits for a message split rank 0 never
// sends. The dump shows that receive failed (it showed it in flight: the dump came first).
TEST(FlightRecorderRanks, ASplitsDumpsNameItsRanksByTheJobsNumbersToo) {
  std::vector<FlightDump> dumps =
      dumps_of_ranks(4, [](const RankContext& ctx, Communicator& world) {
        Communicator half = world.split(ctx.rank % 2, ctx.rank);
        if (half.rank() == 1) expect_receive_to_time_out(half, 0);
        world.barrier();  // split rank 0 stays until then
      });
  ASSERT_EQ(dumps.size(), 2u) << "split rank 1 of each half dumps, once";
  for (const FlightDump& d : dumps) {
    EXPECT_EQ(d.rank, 1);
    const int parity = d.job_ranks.empty() ? -1 : d.job_ranks[0];
    ASSERT_TRUE(parity == 0 || parity == 1) << d.comm;
    EXPECT_EQ(d.job_ranks, (std::vector<int>{parity, parity + 2})) << d.comm;
    expect_records(
        d.records,
        {{0, 0, OpKind::recv, DType::i32, 1, 0, FlightState::failed, ErrorCode::timeout}}, d.comm);
  }
  const std::string s = joined(detail::summarize_flight_dumps(dumps));
  for (int parity : {0, 1}) {
    EXPECT_NE(s.find("rank 1 (job rank " + std::to_string(parity + 2) + ", pid "),
              std::string::npos)
        << s;
    // Split rank 0 of the even half is job rank 0: named once.
    const std::string sender =
        parity == 0 ? std::string("rank 0") : "rank 0 (job rank " + std::to_string(parity) + ")";
    EXPECT_NE(s.find("recv #0 from " + sender + " failed: timeout"), std::string::npos) << s;
  }
}

// ---------------------------------------------------------------------------------------------
// Under tpf run

// Not a test by itself: the rank program the FlightRecorderLauncher tests start with tpf run
// (this binary, with --gtest_also_run_disabled_tests). TPF_FR_SCENARIO says what to do:
// "hang": four barriers, then every rank but 2 calls an all_reduce (with FR_CALL_TIMEOUT_MS, if
// set) that rank 2 never joins; "stop": the same with rank 2 stopping itself (SIGSTOP) instead;
// "lost": as "stop", and the others, whose all_reduce fails once rank 2 is found lost (across
// hosts: its watcher's heartbeat), shrink and go on, saying so, and exit 0; "ok": two barriers,
// print the dump directory, exit 0. With FR_PID_DIR set, each rank writes its pid into the file
// rankN there first.
TEST(FlightRecorderRankProgram, DISABLED_Run) {
  const char* scenario = std::getenv("TPF_FR_SCENARIO");
  if (scenario == nullptr) GTEST_SKIP() << "only run under tpf run by the launcher tests";
  Communicator comm = Communicator::from_env();
  if (const char* dir = std::getenv("FR_PID_DIR")) {
    std::ofstream(std::string(dir) + "/rank" + std::to_string(comm.rank())) << ::getpid() << "\n";
  }
  if (std::string(scenario) == "ok") {
    comm.barrier();
    comm.barrier();
    std::printf("dir=%s\n", std::getenv("TPF_FLIGHT_RECORDER_DIR"));
    std::fflush(stdout);
    std::_Exit(0);
  }
  for (int i = 0; i < 4; ++i) comm.barrier();
  std::printf("ready %d\n", comm.rank());
  std::fflush(stdout);
  if (comm.rank() == 2) {
    if (std::string(scenario) != "hang") ::raise(SIGSTOP);
    for (;;) ::pause();  // until tpf run stops it; the dump signal only interrupts the pause
  }
  CallOptions call;
  if (const char* ms = std::getenv("FR_CALL_TIMEOUT_MS"))
    call.timeout = milliseconds(std::atoi(ms));
  std::vector<float> a(16, 1.0f), b(16);
  try {
    comm.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum, call);
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    if (std::string(scenario) != "lost") std::_Exit(3);
    Communicator live = comm.shrink();
    live.all_reduce(a.data(), b.data(), a.size(), DType::f32, ReduceOp::sum);
    std::printf("rank %d went on with %d ranks: %g\n", comm.rank(), live.size(), b[0]);
    std::fflush(stdout);
    std::_Exit(live.size() == 2 && b[0] == 2.0f ? 0 : 4);
  }
  std::_Exit(0);
}

std::string self_exe() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

std::vector<std::string> rank_program() {
  return {self_exe(), "--gtest_also_run_disabled_tests",
          "--gtest_filter=FlightRecorderRankProgram.DISABLED_Run"};
}

// tpf run's arguments: `launcher` options, then "--" and the rank program.
std::vector<std::string> tpf_run_args(std::vector<std::string> launcher) {
  launcher.push_back("--");
  for (const std::string& a : rank_program()) launcher.push_back(a);
  return launcher;
}

// The dump directory tpf run names in its summary ("dumps in DIR):"), or "" if none.
std::string named_dump_dir(const std::string& err) {
  const size_t at = err.find("dumps in ");
  if (at == std::string::npos) return "";
  return err.substr(at + 9, err.find("):", at) - at - 9);
}

void expect_hang_summary(const Outcome& r) {
  const std::string& e = r.err;
  EXPECT_TRUE(contains(e, "flight recorder summary (dumps in ")) << e;
  EXPECT_TRUE(contains(e, "communicator 'world' (generation 0, 3 ranks, 3 dumped):")) << e;
  EXPECT_TRUE(contains(e,
                       "everyone waits for rank 2: not started collective seq 4 (rank 0 is in "
                       "all_reduce seq 4, rank 1 is in all_reduce seq 4)"))
      << e;
  EXPECT_TRUE(contains(e, "last started barrier seq 3 (completed); last completed barrier seq 3"))
      << e;
}

// Ranks 0 and 1 time out in the all_reduce (after 1 s) and dump; rank 2 is still running when
// the grace after their failure is over, so tpf run asks it for its dump before stopping it.
// `launcher`: tpf run's options that place the ranks.
// `env`: more of tpf run's environment; `r`: what it did.
void expect_hung_job_summarized(const std::vector<std::string>& launcher,
                                std::vector<std::string> env, Outcome& r) {
  for (const char* v : {"TPF_FR_SCENARIO=hang", "FR_CALL_TIMEOUT_MS=1000", "TPF_RUN_GRACE_S=0.5"}) {
    env.push_back(v);
  }
  r = run_tpf(tpf_run_args(launcher), env, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(contains(r.err, "cannot write the flight recorder's dump")) << r.err;
  EXPECT_TRUE(contains(r.err, "asking rank 2 for their flight recorders (1 process)")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "dumped on timeout): last started all_reduce seq 4 (failed: timeout"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "dumped on signal): last started barrier seq 3 (completed)"))
      << r.err;
  expect_hang_summary(r);
  // The directory is kept for the user, and named.
  const std::string dir = named_dump_dir(r.err);
  ASSERT_FALSE(dir.empty()) << r.err;
  // Ranks 0 and 1 dumped on their timeout, rank 2 on the signal; across hosts rank 2 may also
  // have dumped on its communicator's failure (its heartbeat thread takes ranks 0's and 1's
  // notices within about 20 ms, and a failure dumps once) before it was stopped.
  const std::vector<FlightDump> dumps = dumps_in(dir);
  auto count = [&](int rank, const std::string& reason) {
    return std::count_if(dumps.begin(), dumps.end(),
                         [&](const FlightDump& d) { return d.rank == rank && d.reason == reason; });
  };
  EXPECT_EQ(count(0, "timeout"), 1) << dir;
  EXPECT_EQ(count(1, "timeout"), 1) << dir;
  EXPECT_EQ(count(2, "signal"), 1) << dir;
  EXPECT_EQ(dumps.size(), 3u + count(2, "timeout")) << dir;
  EXPECT_LE(count(2, "timeout"), 1) << dir;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(FlightRecorderLauncher, AHungJobSaysWhichRankEveryoneWaitsFor) {
  Outcome r;
  expect_hung_job_summarized({"run", "-n", "3"}, {}, r);
  EXPECT_FALSE(contains(r.err, " on host '")) << "one machine: no host named\n" << r.err;
}

// A rank that is stopped (SIGSTOP here; ^Z or a debugger alike) cannot answer the dump signal:
// tpf run names it and its pid as stopped, does not ask it (nor wait for its dump), and ends it
// with SIGTERM, sent with SIGCONT so that it takes it, where before it waited out the dump wait
// and the grace and sent SIGKILL.
TEST(FlightRecorderLauncher, AStoppedRankIsSaidToBeStoppedAndEndedBySigterm) {
  const Outcome r =
      run_tpf(tpf_run_args({"run", "-n", "3"}),
              {"TPF_FR_SCENARIO=stop", "FR_CALL_TIMEOUT_MS=1000", "TPF_RUN_GRACE_S=0.5"}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       ") is stopped (a stop signal, or a debugger holding it): it cannot dump its "
                       "flight recorder, and the others may be waiting for it"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "tpf run: rank 2 (pid ")) << r.err;
  EXPECT_FALSE(contains(r.err, "asking rank 2 for their flight recorders")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2 was stopped by SIGTERM")) << r.err;
  EXPECT_FALSE(contains(r.err, "sending SIGKILL")) << r.err;
  const std::string dir = named_dump_dir(r.err);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// No rank fails by itself (300 s deadline): tpf run's own timeout asks all three for dumps.
// `launcher`: tpf run's options that place the ranks.
// `env`: more of tpf run's environment.
void expect_job_timeout_summarized(std::vector<std::string> launcher,
                                   std::vector<std::string> env = {}) {
  for (const char* option : {"--job-timeout", "3"}) launcher.push_back(option);
  for (const char* v : {"TPF_FR_SCENARIO=hang", "TPF_RUN_GRACE_S=0.5"}) env.push_back(v);
  const Outcome r = run_tpf(tpf_run_args(launcher), env, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(contains(r.err, "the job ran past --job-timeout 3 s")) << r.err;
  EXPECT_TRUE(contains(r.err, "asking ranks 0,1,2 for their flight recorders (3 processes)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "dumped on signal): last started all_reduce seq 4 (in flight for"))
      << r.err;
  expect_hang_summary(r);
  const std::string dir = named_dump_dir(r.err);
  ASSERT_FALSE(dir.empty()) << r.err;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(FlightRecorderLauncher, JobTimeoutDumpsEveryRankOfAHungJob) {
  expect_job_timeout_summarized({"run", "-n", "3"});
}

TEST(FlightRecorderLauncher, Sigusr2ToTpfRunPrintsASummaryAndTheJobGoesOn) {
  bool sent = false;
  auto on_stdout = [&sent](pid_t tpf, const std::string& out) {
    if (!sent && contains(out, "ready 0") && contains(out, "ready 1") && contains(out, "ready 2")) {
      sent = true;
      kill(tpf, SIGUSR2);
    }
  };
  const std::vector<std::string> args = tpf_run_args({"run", "-n", "3", "--job-timeout", "6"});
  const Outcome r = run_tpf(args, {"TPF_FR_SCENARIO=hang", "TPF_RUN_GRACE_S=0.5"}, on_stdout, 90s);
  ASSERT_TRUE(sent) << r.out << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  // The summary on request comes while the job runs; the job then ends at its timeout, with the
  // summary of its stop.
  const std::string head = "communicator 'world' (generation 0, 3 ranks, 3 dumped):";
  const size_t first = r.err.find(head);
  const size_t stop = r.err.find("the job ran past --job-timeout");
  ASSERT_NE(first, std::string::npos) << r.err;
  ASSERT_NE(stop, std::string::npos) << r.err;
  EXPECT_LT(first, stop) << r.err;
  EXPECT_NE(r.err.find(head, stop), std::string::npos) << r.err;
  EXPECT_EQ(r.exit_code, 124) << r.err;
  const std::string dir = named_dump_dir(r.err);
  ASSERT_FALSE(dir.empty()) << r.err;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Hosts as separate machines are to the launcher's files: it makes its dump directory under
// `tmp` (its TMPDIR), which every fake host sees empty (its own tmpfs there). `session`: whether
// the ranks run in the launcher's process groups or, as under sshd, in sessions of their own.
struct SeparateHosts {
  explicit SeparateHosts(FakeRemoteShell::Session session = FakeRemoteShell::Session::launchers)
      : rsh(FakeRemoteShell::Hosts::named_nodes, tmp.path(), session) {}
  ScratchDir tmp;
  FakeRemoteShell rsh;
  // tpf run's options that start ranks on `hosts` (HOST:N,...) through the fake remote shell.
  std::vector<std::string> run_on(const char* hosts) const {
    return {"run", "--hosts", hosts, "--rsh", rsh.path(), "--store-bind", "127.0.0.1"};
  }
  std::string tmpdir() const { return "TMPDIR=" + tmp.path(); }
};

// Across hosts (tpf run --hosts), hosts not sharing the launcher's files: the ranks cannot reach
// its dump directory, so they dump into the job's store and are asked through the remote shell;
// the summary and the directory cover every host all the same.
TEST(FlightRecorderLauncher, AcrossHostsAHungJobSaysWhichRankEveryoneWaitsFor) {
  SeparateHosts hosts;
  ASSERT_TRUE(hosts.rsh.ok());
  Outcome r;
  expect_hung_job_summarized(hosts.run_on("a:1,b:1,c:1"), {hosts.tmpdir()}, r);
  // Pids do not say where to look when there are several machines: the host does.
  EXPECT_TRUE(contains(r.err, " on host 'c', dumped on signal): last started barrier seq 3"))
      << r.err;
  EXPECT_TRUE(contains(r.err, " on host 'a', dumped on timeout)")) << r.err;
}

TEST(FlightRecorderLauncher, AcrossHostsJobTimeoutAsksEveryHostsRanks) {
  SeparateHosts hosts;
  ASSERT_TRUE(hosts.rsh.ok());
  expect_job_timeout_summarized(hosts.run_on("a:2,b:1"), {hosts.tmpdir()});
}

// The pids the ranks of a run with FR_PID_DIR=`dir` wrote (0 where a rank wrote none).
std::vector<pid_t> rank_pids(const ScratchDir& dir, int ranks) {
  std::vector<pid_t> pids(static_cast<size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r) std::ifstream(dir / ("rank" + std::to_string(r))) >> pids[r];
  return pids;
}

// The PATH for tpf run with a stand-in for `command` first in it (in `bin`), which says so and
// exits with code 7 on every host.
std::string path_with_failing(const ScratchDir& bin, const std::string& command) {
  {
    std::ofstream script(bin / command);
    script << "#!/bin/sh\necho \"" << command << " refused\" >&2\nexit 7\n";
  }
  std::filesystem::permissions(bin / command, std::filesystem::perms::owner_all);
  const char* old_path = std::getenv("PATH");
  return bin.path() + ":" + (old_path ? old_path : "/usr/bin:/bin");
}

// A rank on another host runs there in a session of its own (as sshd starts it): tpf run cannot
// see it stop, and ending its remote shell does not end it. So tpf run looks at its process
// through the remote shell: it names it as stopped, with its pid and host, does not ask it for a
// dump (nor wait for one), and ends it there with SIGTERM and SIGCONT. Before, it asked it, waited
// out the dump wait, and left it stopped on its host after the job. The ranks do not watch the
// store here: its close would end the stopped rank too (SIGKILL), once tpf run has exited.
TEST(FlightRecorderLauncher, AcrossHostsAStoppedRankIsSaidToBeStoppedAndEndedOnItsHost) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir pids;
  const Outcome r =
      run_tpf(tpf_run_args(hosts.run_on("a:1,b:1,c:1")),
              {"TPF_FR_SCENARIO=stop", "FR_CALL_TIMEOUT_MS=1000", "TPF_RUN_GRACE_S=0.5",
               hosts.tmpdir(), "FR_PID_DIR=" + pids.path(), "TPF_END_WITH_STORE=0"},
              {}, 90s);
  const pid_t stopped = rank_pids(pids, 3)[2];
  ASSERT_GT(stopped, 0) << r.err;
  EXPECT_TRUE(ends_soon(stopped)) << "rank 2 (pid " << stopped << ") outlived the job\n" << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(
      contains(r.err, "tpf run: rank 2 (pid " + std::to_string(stopped) +
                          " on host 'c') is stopped (a stop signal, or a debugger holding it): it "
                          "cannot dump its flight recorder, and the others may be "
                          "waiting for it"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "asking rank 2 for their flight recorders")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2 still running after rank 0 failed; sending SIGTERM") ||
              contains(r.err, "rank 2 still running after rank 1 failed; sending SIGTERM"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "warning:")) << r.err;
  const std::string dir = named_dump_dir(r.err);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// tpf run --keep-going across hosts: rank 2 stops on host c (in a session of its own, as sshd
// starts it: ending its remote shell does not end it, and the ranks do not end with the store);
// its watcher's heartbeat finds it lost and tells the store, the others shrink and go on, and tpf
// run ends rank 2 on its host instead of waiting for it (before, until --job-timeout).
TEST(FlightRecorderLauncher, AcrossHostsKeepGoingEndsARankFoundLostOnItsHost) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir pids;
  std::vector<std::string> launcher = hosts.run_on("a:1,b:1,c:1");
  for (const char* a : {"--keep-going", "--job-timeout", "60"}) launcher.push_back(a);
  const Outcome r = run_tpf(tpf_run_args(launcher),
                            {"TPF_FR_SCENARIO=lost", "TPF_HOST_LOST_S=3", hosts.tmpdir(),
                             "FR_PID_DIR=" + pids.path(), "TPF_END_WITH_STORE=0"},
                            {}, 90s);
  const pid_t stopped = rank_pids(pids, 3)[2];
  ASSERT_GT(stopped, 0) << r.err;
  EXPECT_TRUE(ends_soon(stopped)) << "rank 2 (pid " << stopped << ") outlived the job\n" << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;  // a rank failed
  EXPECT_FALSE(contains(r.err, "--job-timeout")) << r.err;
  EXPECT_TRUE(contains(r.err, "tpf run: rank 2 was found lost by rank ")) << r.err;
  EXPECT_TRUE(contains(r.err, "(host 'c') has sent no heartbeat")) << r.err;
  EXPECT_TRUE(contains(r.err, "; ending it\n")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2: no dump (found lost and ended)")) << r.err;
  EXPECT_FALSE(contains(r.err, "no dump from rank 2")) << r.err;
  for (int rank : {0, 1}) {
    EXPECT_TRUE(contains(r.out, "rank " + std::to_string(rank) + " went on with 2 ranks: 2"))
        << r.out << r.err;
  }
  const std::string dir = named_dump_dir(r.err);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// Where the processes' states cannot be read on a host, tpf run says so and takes them as running:
// here `cat` fails on every host, so the stopped rank 2 is asked for its dump, waited for until the
// dump wait runs out, and still ended on its host.
TEST(FlightRecorderLauncher, AcrossHostsAStateThatCannotBeReadIsSaid) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir pids, bin;
  const Outcome r =
      run_tpf(tpf_run_args(hosts.run_on("a:1,b:1,c:1")),
              {"TPF_FR_SCENARIO=stop", "FR_CALL_TIMEOUT_MS=1000", "TPF_RUN_GRACE_S=0.5",
               "TPF_RUN_DUMP_WAIT_S=0.5", hosts.tmpdir(), "FR_PID_DIR=" + pids.path(),
               "TPF_END_WITH_STORE=0", "PATH=" + path_with_failing(bin, "cat")},
              {}, 90s);
  const pid_t stopped = rank_pids(pids, 3)[2];
  ASSERT_GT(stopped, 0) << r.err;
  EXPECT_TRUE(ends_soon(stopped)) << "rank 2 (pid " << stopped << ") outlived the job\n" << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "warning: cannot tell whether rank 2 on host 'c' is stopped (exit "
                       "code 7)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "asking rank 2 for their flight recorders (1 process)")) << r.err;
  const std::string dir = named_dump_dir(r.err);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// Runs the "hang" scenario on hosts a:2,b:1 whose ranks run in sessions of their own (as sshd
// starts them), sends `sig` to tpf run once every rank is ready, and expects each rank's process
// to end; `ranks`: their pids. `end_with_store`: TPF_END_WITH_STORE for tpf run (and so for the
// ranks), or nullptr to leave it to tpf run.
Outcome signal_a_hung_job_across_hosts(int sig, const char* end_with_store,
                                       std::vector<pid_t>& ranks) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  EXPECT_TRUE(hosts.rsh.ok());
  ScratchDir pids;
  bool sent = false;
  auto on_stdout = [&sent, sig](pid_t tpf, const std::string& out) {
    if (!sent && contains(out, "ready 0") && contains(out, "ready 1") && contains(out, "ready 2")) {
      sent = true;
      kill(tpf, sig);
    }
  };
  std::vector<std::string> env = {"TPF_FR_SCENARIO=hang", "TPF_RUN_GRACE_S=0.5", hosts.tmpdir(),
                                  "FR_PID_DIR=" + pids.path()};
  if (end_with_store != nullptr) env.push_back(std::string("TPF_END_WITH_STORE=") + end_with_store);
  const Outcome r = run_tpf(tpf_run_args(hosts.run_on("a:2,b:1")), env, on_stdout, 90s);
  EXPECT_TRUE(sent) << r.out << r.err;
  ranks = rank_pids(pids, 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_GT(ranks[rank], 0) << r.err;
    if (ranks[rank] <= 0) continue;
    EXPECT_TRUE(ends_soon(ranks[rank]))
        << "rank " << rank << " (pid " << ranks[rank] << ") outlived tpf run\n"
        << r.err;
  }
  EXPECT_FALSE(r.timed_out) << r.err;
  return r;
}

// A signal to tpf run reaches the ranks on other hosts, not only their remote shells: each
// rank's process ends. Before, the shells ended and the ranks stayed (rank 2 waiting in pause()
// for good, ranks 0 and 1 in their all_reduce). The ranks do not watch the store here: its close
// would end them too, once tpf run has exited.
TEST(FlightRecorderLauncher, AcrossHostsASignalToTpfRunReachesTheRanksOnTheirHosts) {
  std::vector<pid_t> ranks;
  const Outcome r = signal_a_hung_job_across_hosts(SIGTERM, "0", ranks);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(contains(r.err, "received SIGTERM (15); forwarding it to ranks 0,1,2")) << r.err;
  EXPECT_FALSE(contains(r.err, "warning:")) << r.err;
  const std::string dir = named_dump_dir(r.err);
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// tpf run killed outright (SIGKILL: it can signal nobody) still ends the ranks it started on
// other hosts: each watches the launcher's store (TPF_END_WITH_STORE=1, which tpf run --hosts
// sets where the user did not) and ends once the store's connection closes, as PR_SET_PDEATHSIG
// ends the ranks on the launcher's machine. Before, they ran on (rank 2 waiting in pause() for
// good).
TEST(FlightRecorderLauncher, AcrossHostsTheRanksEndWhenTpfRunIsKilled) {
  std::vector<pid_t> ranks;
  const Outcome r = signal_a_hung_job_across_hosts(SIGKILL, nullptr, ranks);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(r.err, "tpf: rank " + std::to_string(rank) + " (pid " +
                                    std::to_string(ranks[rank]) + "): the job's store at "))
        << r.err;
  }
  EXPECT_TRUE(contains(r.err,
                       " closed its connection: its launcher has ended, so this rank ends "
                       "too (TPF_END_WITH_STORE=1)"))
      << r.err;
}

// tpf run's arguments `launcher` with every rank running `script` (sh -c).
std::vector<std::string> running_script(std::vector<std::string> launcher,
                                        const std::string& script) {
  for (const char* word : {"--", "sh", "-c"}) launcher.push_back(word);
  launcher.push_back(script);
  return launcher;
}

// Expects each of `pids` (written by the ranks, rank_pids) to end soon: nothing of the job may
// outlive it.
void expect_each_ends(const std::vector<pid_t>& pids, const Outcome& r) {
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    ASSERT_GT(pids[rank], 0) << "rank " << rank << " wrote no pid\n" << r.err;
    EXPECT_TRUE(ends_soon(pids[rank]))
        << "pid " << pids[rank] << " of rank " << rank << " outlived the job\n"
        << r.err;
  }
}

// A rank on another host that has made no communicator (so it armed no flight recorder, and
// watches no store: here a shell that execs `sleep`, in a session of its own as under sshd) is
// found there by the job's id in its environment, and a signal to tpf run reaches it. Before,
// only its remote shell got the signal, and the rank ran on after the job.
TEST(FlightRecorderLauncher, AcrossHostsASignalReachesRanksThatMadeNoCommunicator) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir pids;
  bool sent = false;
  auto on_stdout = [&sent](pid_t tpf, const std::string& out) {
    if (!sent && contains(out, "ready 0") && contains(out, "ready 1") && contains(out, "ready 2")) {
      sent = true;
      kill(tpf, SIGTERM);
    }
  };
  const Outcome r = run_tpf(
      running_script(hosts.run_on("a:2,b:1"), "echo $$ > " + pids.path() +
                                                  "/rank$TPF_RANK && echo ready $TPF_RANK && "
                                                  "exec sleep 600"),
      {"TPF_RUN_GRACE_S=0.5"}, on_stdout, 90s);
  ASSERT_TRUE(sent) << r.out << r.err;
  expect_each_ends(rank_pids(pids, 3), r);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(contains(r.err, "received SIGTERM (15); forwarding it to ranks 0,1,2")) << r.err;
  EXPECT_FALSE(contains(r.err, "warning:")) << r.err;
}

// What the ranks on other hosts leave running there (a shell's background job, in the rank's
// session: out of the launcher's reach under sshd) is killed once the job is over, and said.
// Before, it ran on after tpf run had exited with success.
TEST(FlightRecorderLauncher, AcrossHostsWhatTheRanksLeftRunningIsKilledAfterTheJob) {
  SeparateHosts hosts(FakeRemoteShell::Session::own);
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir pids;
  const Outcome r =
      run_tpf(running_script(hosts.run_on("a:1,b:2"), "sleep 600 > /dev/null 2>&1 & echo $! > " +
                                                          pids.path() + "/rank$TPF_RANK"),
              {}, {}, 90s);
  const std::vector<pid_t> left = rank_pids(pids, 3);
  expect_each_ends(left, r);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tpf run: killing 1 process the job left running on host 'a' after "
                       "its ranks ended: pid " +
                           std::to_string(left[0]) + " (rank 0)\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tpf run: killing 2 processes the job left running on host 'b' "
                       "after its ranks ended: pid " +
                           std::to_string(left[1]) + " (rank 1), pid " + std::to_string(left[2]) +
                           " (rank 2)\n"))
      << r.err;
}

// On the launcher's own machine, what a rank started in a session of its own (out of the rank's
// process group, which the launcher kills after the job) is killed once the job is over, and
// said, as on other hosts. The rank waits until that process is in its session (it writes its
// pid from there), so the group's kill cannot take it first.
TEST(FlightRecorderLauncher, WhatTheRanksLeftRunningInSessionsOfTheirOwnIsKilledAfterTheJob) {
  ScratchDir pids;
  const std::string file = pids.path() + "/rank$TPF_RANK";
  const std::string script = "setsid sh -c \"echo \\$\\$ > " + file + ".new && mv " + file +
                             ".new " + file + " && exec sleep 600\" > /dev/null 2>&1 & " +
                             "while [ ! -s " + file + " ]; do :; done";
  const Outcome r = run_tpf(running_script({"run", "-n", "2"}, script), {}, {}, 90s);
  const std::vector<pid_t> left = rank_pids(pids, 2);
  expect_each_ends(left, r);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tpf run: killing 2 processes the job left running on this machine "
                       "after its ranks ended: pid " +
                           std::to_string(left[0]) + " (rank 0), pid " + std::to_string(left[1]) +
                           " (rank 1)\n"))
      << r.err;
}

// A signal to tpf run reaches, on its own machine, what a rank started in a session of its own
// too, not only the ranks' process groups: the child here says it got SIGTERM (its trap) and
// ends; its rank ignores SIGTERM and waits for that word, so the job ends only once it came.
// Before, the child heard nothing until it was killed after the job (or, earlier, never).
TEST(FlightRecorderLauncher, ASignalToTpfRunReachesWhatARankStartedInASessionOfItsOwn) {
  ScratchDir dir;
  const std::string child = dir.path() + "/child", got = dir.path() + "/got";
  // The rank ignores SIGTERM only once the child started: a child would inherit the ignoring,
  // which a shell cannot trap.
  const std::string script =
      "setsid sh -c 'trap \"kill \\$!; echo got > " + got + "; exit 0\" TERM; echo $$ > " + child +
      ".new && mv " + child + ".new " + child +
      "; sleep 600 & wait' > /dev/null 2>&1 & trap '' TERM; while [ ! -s " + child +
      " ]; do :; done; echo ready; while [ ! -s " + got + " ]; do :; done";
  bool sent = false;
  auto on_stdout = [&sent](pid_t tpf, const std::string& out) {
    if (!sent && contains(out, "ready")) {
      sent = true;
      kill(tpf, SIGTERM);
    }
  };
  const Outcome r =
      run_tpf(running_script({"run", "-n", "1"}, script), {"TPF_RUN_GRACE_S=20"}, on_stdout, 90s);
  ASSERT_TRUE(sent) << r.out << r.err;
  pid_t child_pid = 0;
  std::ifstream(child) >> child_pid;
  ASSERT_GT(child_pid, 0) << r.err;
  EXPECT_TRUE(ends_soon(child_pid)) << "the child (pid " << child_pid << ") outlived the job\n"
                                    << r.err;
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  std::string word;
  std::ifstream(got) >> word;
  EXPECT_EQ(word, "got") << r.err;
}

// A host where the job's processes cannot be looked for is said (here `find` fails on every
// host); the job itself is not failed for it.
TEST(FlightRecorderLauncher, AcrossHostsASearchForTheJobsProcessesThatFailsIsSaid) {
  SeparateHosts hosts;
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir bin;
  const Outcome r = run_tpf(running_script(hosts.run_on("a:1,b:1"), "true"),
                            {"PATH=" + path_with_failing(bin, "find")}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* host : {"a", "b"}) {
    EXPECT_TRUE(contains(r.err, std::string("warning: cannot look for the job's processes on "
                                            "host '") +
                                    host + "' (exit code 7)"))
        << r.err;
  }
}

// A request the remote shell cannot deliver is said, and the launcher waits for no dump from
// those hosts: here `kill` fails on every host (a stand-in first on the PATH), so the ranks are
// stopped without a summary of their own.
TEST(FlightRecorderLauncher, AcrossHostsARequestThatCannotReachAHostIsSaid) {
  SeparateHosts hosts;
  ASSERT_TRUE(hosts.rsh.ok());
  ScratchDir bin;
  const std::string path = path_with_failing(bin, "kill");
  std::vector<std::string> launcher = hosts.run_on("a:2,b:1");
  for (const char* option : {"--job-timeout", "3"}) launcher.push_back(option);
  const Outcome r = run_tpf(
      tpf_run_args(launcher),
      {"TPF_FR_SCENARIO=hang", "TPF_RUN_GRACE_S=0.5", "PATH=" + path, hosts.tmpdir()}, {}, 90s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(contains(r.err, "on host 'a' for their flight recorders failed (exit code 7)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "on host 'b' for their flight recorders failed (exit code 7)"))
      << r.err;
  // The ranks' processes there cannot be signalled either; their shells still can.
  EXPECT_TRUE(contains(r.err,
                       "warning: sending SIGTERM (15) to ranks 0,1 on host 'a' failed "
                       "(exit code 7)"))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "warning: sending SIGCONT (18) to rank 2 on host 'b' failed "
                       "(exit code 7)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "ranks 0,1,2 still running at the job timeout; sending SIGTERM"))
      << r.err;
}

TEST(FlightRecorderLauncher, BadJobTimeoutIsAUsageError) {
  for (const char* bad : {"0", "-1", "soon", "1e9"}) {
    const Outcome r = run_tpf({"run", "-n", "1", "--job-timeout", bad, "--", "true"});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--job-timeout expects a positive number of seconds")) << r.err;
  }
}

TEST(FlightRecorderLauncher, ASuccessfulJobLeavesNoDumpDirectory) {
  const std::vector<std::string> args = tpf_run_args({"run", "-n", "2"});
  const Outcome r = run_tpf(args, {"TPF_FR_SCENARIO=ok"}, {}, 60s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "flight recorder")) << r.err;
  const size_t at = r.out.find("dir=");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string dir = r.out.substr(at + 4, r.out.find('\n', at) - at - 4);
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " was left behind";
}

}  // namespace
}  // namespace tpf::testing
