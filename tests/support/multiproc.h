// Multi-process test harness: runs a test body in `size` forked child processes, one per rank, that
// rendezvous through a TcpStoreServer hosted by the parent (the gtest process). Each child reports
// failure through a pipe and its exit status; the parent collects one RankOutcome per rank under a
// hard deadline, after which it SIGKILLs every child still running and says which ranks they were.
//
// Children leave with _exit(): they never run gtest's teardown, atexit handlers or static
// destructors, which belong to the parent.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpf/comm.h"
#include "tpf/store.h"

namespace tpf::testing {

struct RunOptions {
  // Hard limit for the whole run; children still running then are killed and reported.
  std::chrono::milliseconds deadline{60000};
  // Exported to the children as TPF_JOB_ID (names the job's shared-memory segments). Empty: a
  // unique name is made from the current gtest name, the parent's pid and a counter.
  std::string job_name;
  std::string secret = "tpf-test-secret";
  CommOptions comm_options;
};

// Everything a child needs to create its own communicator (see run_ranks_raw).
struct RankContext {
  int rank = 0;
  int size = 0;
  std::string store_address;  // "127.0.0.1:PORT"
  std::string secret;
  std::string job_name;
  CommOptions comm_options;
};

struct RankOutcome {
  int rank = 0;
  bool exited = false;     // exited normally (see exit_code)
  int exit_code = -1;      // valid if exited
  int signal = 0;          // the signal that killed it, 0 if none
  bool timed_out = false;  // still running at the deadline (then killed by SIGKILL)
  std::string message;     // what the child wrote before failing (exception text)

  bool ok() const noexcept { return exited && exit_code == 0 && !timed_out; }
  // One line: "rank 2: killed by signal 9 (Killed): <message>".
  std::string describe() const;
};

// Thrown by TPF_CHILD_CHECK inside a child; the harness reports its message.
class ChildCheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A job name no other run shares (the current test's name, this process, a counter): what a run
// gets where RunOptions::job_name is empty; a test that checks the job's segments names it so.
std::string unique_job_name();

// Runs body(comm) in `size` children, each with a Communicator created through the parent's store.
std::vector<RankOutcome> run_ranks(int size, const std::function<void(Communicator&)>& body,
                                   const RunOptions& options = {});
// Like run_ranks, but the body creates (or deliberately fails to create) its own communicator.
std::vector<RankOutcome> run_ranks_raw(int size,
                                       const std::function<void(const RankContext&)>& body,
                                       const RunOptions& options = {});

// A child's own connection to the harness's store. job_rank -1: a client that does not say which
// rank it is (a store that cannot tell deaths); otherwise the rank it reports as dead if it dies.
std::shared_ptr<Store> connect_to_store(
    const RankContext& ctx, int job_rank,
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(30));

// gtest: one non-fatal failure per rank that did not succeed, naming the rank and its message.
void expect_all_ok(const std::vector<RankOutcome>& outcomes);
// gtest: the ranks `victims` were killed by SIGKILL (as they killed themselves), every other one
// succeeded.
void expect_only_victims_killed(const std::vector<RankOutcome>& outcomes,
                                const std::set<int>& victims);
// gtest: /dev/shm holds nothing of the job named `job` (RunOptions::job_name).
void expect_no_segments_of(const std::string& job);

// Memory shared by the parent and all children (an anonymous MAP_SHARED mapping made before the
// fork): lets children coordinate without the communicator under test, e.g. "rank 0 has timed
// out, you may go on". Zero-filled.
class SharedBlock {
 public:
  explicit SharedBlock(size_t bytes = 4096);
  ~SharedBlock();
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return bytes_; }
  // The i-th 64-bit atomic counter in the block (each on its own cache line).
  std::atomic<int64_t>& counter(size_t i) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Waits (bounded) until pred() holds, yielding between checks; false if the timeout expired first.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// The state letter /proc gives the process or thread `id` ('T': stopped, 'S': asleep, as on a
// mutex), or 0 where it has none (gone).
char process_state(pid_t id);

// Entries of /dev/shm whose names start with prefix (sorted).
std::vector<std::string> list_dev_shm(const std::string& prefix = "tpf-");

[[noreturn]] void child_check_failed(const char* expr, const std::string& message, const char* file,
                                     int line);

}  // namespace tpf::testing

// For use inside a child body: throws ChildCheckFailure (reported by the parent) if cond is false.
// msg may be any expression convertible to std::string.
#define TPF_CHILD_CHECK(cond, msg)                                                     \
  do {                                                                                 \
    if (!(cond)) ::tpf::testing::child_check_failed(#cond, (msg), __FILE__, __LINE__); \
  } while (0)
