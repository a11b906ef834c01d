#include "support/multiproc.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::testing {
namespace {

constexpr size_t kMaxMessageBytes = 64 * 1024;  // longer child messages are cut

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; nobody to tell
    done += static_cast<size_t>(n);
  }
}

// The child side: never returns, never runs the parent's teardown.
[[noreturn]] void child_main(int report_fd, pid_t parent, const RankContext& ctx,
                             const std::function<void(const RankContext&)>& body) {
  // If the parent (the gtest process) dies, do not linger holding shared memory.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(98);
  ::setenv("TPF_JOB_ID", ctx.job_name.c_str(), 1);
  // Keep freed large blocks in the heap instead of returning them to the kernel: tests allocate
  // and free many-MiB buffers per case, and on virtual machines the page faults of fresh mappings
  // cost more than the collectives being tested.
  ::mallopt(M_MMAP_THRESHOLD, 512 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1024 << 20);
  int code = 0;
  std::string message;
  try {
    body(ctx);
  } catch (const tpf::Error& e) {
    code = 1;
    message = std::string("tpf::Error(") + error_code_name(e.code()) + "): " + e.what();
  } catch (const ChildCheckFailure& e) {
    code = 2;
    message = e.what();
  } catch (const std::exception& e) {
    code = 3;
    message = std::string("exception: ") + e.what();
  } catch (...) {
    code = 4;
    message = "unknown exception";
  }
  if (!message.empty()) write_all(report_fd, message.substr(0, kMaxMessageBytes));
  ::close(report_fd);
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

// Owns the forked children: whatever happens in the parent, no child outlives the run.
class ChildSet {
 public:
  struct Child {
    pid_t pid = -1;
    int fd = -1;  // read end of its report pipe
    bool reaped = false;
  };
  explicit ChildSet(int size) : children_(static_cast<size_t>(size)) {}
  ~ChildSet() {
    for (auto& c : children_) {
      if (c.pid > 0 && !c.reaped) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      if (c.fd >= 0) ::close(c.fd);
    }
  }
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;
  Child& operator[](size_t i) { return children_[i]; }
  size_t size() const { return children_.size(); }

 private:
  std::vector<Child> children_;
};

void drain(int fd, std::string& into) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      if (into.size() < kMaxMessageBytes) into.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // EOF or EAGAIN
  }
}

void record_status(RankOutcome& out, int status) {
  if (WIFEXITED(status)) {
    out.exited = true;
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
}

}  // namespace

std::string unique_job_name() {
  static std::atomic<int> counter{0};
  std::string test = "test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    test = std::string(info->test_suite_name()) + "." + info->name();
  }
  // Keep it short and file-name friendly: segment names derive from it.
  std::string clean;
  for (char c : test) clean += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (clean.size() > 40) clean = clean.substr(clean.size() - 40);
  return "t" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" +
         clean;
}

std::string RankOutcome::describe() const {
  std::string s = "rank " + std::to_string(rank) + ": ";
  if (timed_out) {
    s += "still running at the deadline (killed)";
  } else if (exited) {
    s += "exit code " + std::to_string(exit_code);
  } else if (signal != 0) {
    s += "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  } else {
    s += "unknown status";
  }
  if (!message.empty()) s += ": " + message;
  return s;
}

[[noreturn]] void child_check_failed(const char* expr, const std::string& message, const char* file,
                                     int line) {
  throw ChildCheckFailure(std::string(file) + ":" + std::to_string(line) +
                          ": check failed: " + expr + (message.empty() ? "" : " -- " + message));
}

namespace {

// Hosts the rendezvous store in a process of its own. The test process must not have a second
// thread when it forks the ranks: a child forked while that thread holds an allocator lock
// (ASan's allocator has no fork handlers) inherits the lock held and deadlocks.
class StoreProcess {
 public:
  explicit StoreProcess(const std::string& secret) {
    int port_pipe[2], lifeline[2];
    if (::pipe2(port_pipe, O_CLOEXEC) != 0 || ::pipe2(lifeline, O_CLOEXEC) != 0) {
      throw std::runtime_error("run_ranks: pipe failed");
    }
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error(std::string("run_ranks: fork failed: ") + std::strerror(errno));
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(port_pipe[0]);
      ::close(lifeline[1]);
      uint16_t port = 0;
      try {
        TcpStoreServer server("127.0.0.1", 0, secret);
        port = server.port();
        (void)!::write(port_pipe[1], &port, sizeof(port));
        char byte;
        while (::read(lifeline[0], &byte, 1) < 0 && errno == EINTR) {
        }  // EOF: the test process is done with the store
      } catch (...) {
        (void)!::write(port_pipe[1], &port, sizeof(port));  // port 0 reports the failure
      }
      ::_exit(0);
    }
    ::close(port_pipe[1]);
    ::close(lifeline[0]);
    lifeline_ = lifeline[1];
    ssize_t got;
    do {
      got = ::read(port_pipe[0], &port_, sizeof(port_));
    } while (got < 0 && errno == EINTR);
    ::close(port_pipe[0]);
    if (got != static_cast<ssize_t>(sizeof(port_)) || port_ == 0) {
      throw std::runtime_error("run_ranks: the store process could not start a TcpStoreServer");
    }
  }
  ~StoreProcess() {
    ::close(lifeline_);
    int status = 0;
    ::waitpid(pid_, &status, 0);  // it exits as soon as it sees the lifeline close
  }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  uint16_t port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int lifeline_ = -1;
  uint16_t port_ = 0;
};

// TPF_TEST_RUN_LOG=FILE appends a line per run, "SECONDS DEADLINE_SECONDS Suite.Test": how close
// the multi-process runs come to their deadline on a loaded machine, where a run past it fails.
void log_run_time(Clock::duration took, std::chrono::milliseconds deadline) {
  const char* path = std::getenv("TPF_TEST_RUN_LOG");
  if (path == nullptr || *path == '\0') return;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::FILE* log = std::fopen(path, "a");
  if (log == nullptr) return;
  std::fprintf(log, "%.2f %.1f %s.%s\n", std::chrono::duration<double>(took).count(),
               std::chrono::duration<double>(deadline).count(),
               test ? test->test_suite_name() : "?", test ? test->name() : "?");
  std::fclose(log);
}

}  // namespace

std::vector<RankOutcome> run_ranks_raw(int size,
                                       const std::function<void(const RankContext&)>& body,
                                       const RunOptions& options) {
  if (size < 1) throw std::invalid_argument("run_ranks: size must be >= 1");
  const auto started = Clock::now();
  StoreProcess store(options.secret);
  RankContext base;
  base.size = size;
  base.store_address = "127.0.0.1:" + std::to_string(store.port());
  base.secret = options.secret;
  base.job_name = options.job_name.empty() ? unique_job_name() : options.job_name;
  base.comm_options = options.comm_options;

  std::fflush(stdout);  // or the children would print the parent's buffered output again
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  ChildSet children(size);
  for (int r = 0; r < size; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("run_ranks: pipe failed");
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw std::runtime_error(std::string("run_ranks: fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::close(fds[0]);
      RankContext ctx = base;
      ctx.rank = r;
      child_main(fds[1], parent, ctx, body);
    }
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    children[static_cast<size_t>(r)].pid = pid;
    children[static_cast<size_t>(r)].fd = fds[0];
  }

  std::vector<RankOutcome> outcomes(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) outcomes[static_cast<size_t>(r)].rank = r;
  const auto deadline = Clock::now() + options.deadline;
  size_t running = children.size();
  while (running > 0) {
    // Read reports as they come (a pipe holds only 64 KiB), and reap children as they exit.
    std::vector<pollfd> pfds;
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].fd >= 0) pfds.push_back({children[i].fd, POLLIN, 0});
    }
    if (!pfds.empty())
      ::poll(pfds.data(), pfds.size(), 5);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // poll interval, not sync
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].fd >= 0) drain(children[i].fd, outcomes[i].message);
      if (children[i].reaped) continue;
      int status = 0;
      pid_t got = ::waitpid(children[i].pid, &status, WNOHANG);
      if (got == children[i].pid) {
        children[i].reaped = true;
        --running;
        record_status(outcomes[i], status);
      }
    }
    if (running > 0 && Clock::now() >= deadline) {
      for (size_t i = 0; i < children.size(); ++i) {
        if (children[i].reaped) continue;
        ::kill(children[i].pid, SIGKILL);
        int status = 0;
        ::waitpid(children[i].pid, &status, 0);
        children[i].reaped = true;
        outcomes[i].timed_out = true;
        record_status(outcomes[i], status);
      }
      running = 0;
    }
  }
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i].fd >= 0) drain(children[i].fd, outcomes[i].message);
  }
  log_run_time(Clock::now() - started, options.deadline);
  return outcomes;
}

std::vector<RankOutcome> run_ranks(int size, const std::function<void(Communicator&)>& body,
                                   const RunOptions& options) {
  return run_ranks_raw(
      size,
      [&body](const RankContext& ctx) {
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        body(comm);
      },
      options);
}

void expect_all_ok(const std::vector<RankOutcome>& outcomes) {
  std::vector<int> late;
  for (const auto& o : outcomes) {
    if (o.timed_out) late.push_back(o.rank);
  }
  if (!late.empty()) {
    std::string ranks;
    for (int r : late) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    ADD_FAILURE() << "deadline expired; ranks still running: " << ranks;
  }
  for (const auto& o : outcomes) {
    if (!o.ok()) ADD_FAILURE() << o.describe();
  }
}

SharedBlock::SharedBlock(size_t bytes) : bytes_(bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("SharedBlock: mmap failed");
  data_ = p;
}

SharedBlock::~SharedBlock() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

std::atomic<int64_t>& SharedBlock::counter(size_t i) const {
  constexpr size_t kStride = 64;  // one cache line each
  if ((i + 1) * kStride > bytes_) throw std::out_of_range("SharedBlock::counter: index too large");
  static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t));
  // Zero-filled memory is a valid atomic<int64_t> holding 0 (lock-free on every target we use).
  return *std::launder(
      reinterpret_cast<std::atomic<int64_t>*>(static_cast<char*>(data_) + i * kStride));
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    // A short nap between checks leaves the 2 shared cores to the ranks doing the work.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

char process_state(pid_t id) {
  char stat[512];
  const std::string path = "/proc/" + std::to_string(id) + "/stat";
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return 0;
  const size_t length = std::fread(stat, 1, sizeof stat - 1, file);
  std::fclose(file);
  stat[length] = '\0';
  // "pid (name) S ...": the name may hold anything, so the state follows its last ')'.
  const char* name_end = std::strrchr(stat, ')');
  return name_end == nullptr || name_end[1] != ' ' ? 0 : name_end[2];
}

std::shared_ptr<Store> connect_to_store(const RankContext& ctx, int job_rank,
                                        std::chrono::milliseconds connect_timeout) {
  const auto colon = ctx.store_address.rfind(':');
  const auto port = static_cast<uint16_t>(std::stoi(ctx.store_address.substr(colon + 1)));
  return std::make_shared<TcpStoreClient>(ctx.store_address.substr(0, colon), port, ctx.secret,
                                          connect_timeout, job_rank);
}

void expect_only_victims_killed(const std::vector<RankOutcome>& outcomes,
                                const std::set<int>& victims) {
  for (const RankOutcome& o : outcomes) {
    if (victims.count(o.rank)) {
      EXPECT_EQ(o.signal, SIGKILL) << o.describe();
    } else {
      EXPECT_TRUE(o.ok()) << o.describe();
    }
  }
}

void expect_no_segments_of(const std::string& job) {
  const auto left = list_dev_shm("tpf-" + std::to_string(::getuid()) + "-" + job + "-");
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

std::vector<std::string> list_dev_shm(const std::string& prefix) {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace tpf::testing
