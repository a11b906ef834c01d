#include "comm/flight_recorder.h"

#include <fcntl.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "base/env_config.h"
#include "comm/flight_store.h"
#include "topo/hosts.h"
#include "transport/ucx_network.h"

namespace tpf::detail {
namespace {

constexpr uint64_t kPhaseBegun = 0;
constexpr uint64_t kPhaseWritingBegin = 1;
constexpr uint64_t kPhaseEnded = 2;
constexpr uint64_t kPhaseWritingEnd = 3;
constexpr const char* kTag = "# tpf-flight-recorder";

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t read_tsc() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return static_cast<int64_t>(__rdtsc());
#else
  return 0;
#endif
}

// Record times are TSC ticks where the kernel itself keeps time with the TSC (so it is invariant
// and in step across cores), else steady_clock nanoseconds. Ticks become steady_clock nanoseconds
// through one anchor (taken when the first recorder is made) and a rate measured once, at the
// first conversion, over at least 50 ms (an error of about 1e-6).
class TickClock {
 public:
  static TickClock& instance() {
    static auto* clock = new TickClock;  // never destroyed, like the registry
    return *clock;
  }
  bool tsc() const noexcept { return tsc_; }

  int64_t to_ns(int64_t ticks) {
    if (!tsc_) return ticks;
    const double rate = ns_per_tick();
    return anchor_ns_ + static_cast<int64_t>(static_cast<double>(ticks - anchor_ticks_) * rate);
  }

 private:
  TickClock() {
#if defined(__x86_64__) || defined(__i386__)
    std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string source;
    in >> source;
    tsc_ = source == "tsc";
#endif
    if (tsc_) pair(anchor_ticks_, anchor_ns_);
  }

  // A (ticks, ns) pair read as close together as the clocks allow.
  static void pair(int64_t& ticks, int64_t& ns) {
    const int64_t before = read_tsc();
    ns = now_ns();
    ticks = before + (read_tsc() - before) / 2;
  }

  double ns_per_tick() {
    std::lock_guard lock(mu_);
    if (rate_ > 0) return rate_;
    constexpr int64_t kMinSpanNs = 50'000'000;
    const int64_t elapsed = now_ns() - anchor_ns_;
    if (elapsed < kMinSpanNs)
      std::this_thread::sleep_for(std::chrono::nanoseconds(kMinSpanNs - elapsed));
    int64_t ticks = 0, ns = 0;
    pair(ticks, ns);
    rate_ = ticks > anchor_ticks_
                ? static_cast<double>(ns - anchor_ns_) / static_cast<double>(ticks - anchor_ticks_)
                : 1.0;
    return rate_;
  }

  bool tsc_ = false;
  int64_t anchor_ticks_ = 0;
  int64_t anchor_ns_ = 0;
  std::mutex mu_;
  double rate_ = 0;
};

void cpu_relax(int& spins) noexcept {
  // The other writer holds the slot for a handful of stores; yield only if it was preempted.
  if (++spins > 64) std::this_thread::yield();
}

uint32_t pack(coll::OpKind kind, DType dtype, FlightState state, ErrorCode error) noexcept {
  return static_cast<uint32_t>(kind) | static_cast<uint32_t>(dtype) << 8 |
         static_cast<uint32_t>(state) << 16 | static_cast<uint32_t>(error) << 24;
}

// Names in dumps are single tokens: no blanks, no '=', nothing unprintable.
std::string token(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c <= ' ' || c == '=' || c == 0x7f) c = '_';
  }
  return out.empty() ? "_" : out;
}

std::string env_or(const char* name, const char* fallback) {
  return base::env_string(name).value_or(fallback);
}

// This process's rank in the launcher's world, for file names ("x" if no launcher says).
std::string world_rank() {
  if (auto r = base::env_string("TPF_RANK")) return token(*r);
  if (auto r = base::env_string("RANK")) return token(*r);
  return "x";
}

// The dump signal: TPF_FLIGHT_RECORDER_SIGNAL (USR1, USR2, SIGUSR1, a number, or off); 0 = none.
int dump_signal() {
  auto text = base::env_string("TPF_FLIGHT_RECORDER_SIGNAL");
  if (!text) return SIGUSR2;
  std::string name = *text;
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  if (name == "off" || name == "none" || name == "0") return 0;
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  char* end = nullptr;
  long number = std::strtol(name.c_str(), &end, 10);
  if (!name.empty() && *end == '\0' && number > 0 && number < SIGRTMIN && number != SIGKILL &&
      number != SIGSTOP) {
    return static_cast<int>(number);
  }
  throw Error(ErrorCode::invalid_argument,
              "TPF_FLIGHT_RECORDER_SIGNAL='" + *text +
                  "' is not a signal the flight recorder can use (USR1, USR2, a number, or off)");
}

// Where this process's dumps go: a file in TPF_FLIGHT_RECORDER_DIR, or "" for stderr.
std::string dump_path() {
  auto dir = base::env_string("TPF_FLIGHT_RECORDER_DIR");
  if (!dir) return {};
  std::string job = token(env_or("TPF_JOB_ID", "local"));
  for (char& c : job) {
    if (c == '/') c = '_';
  }
  return *dir + "/flight-" + job + "-rank" + world_rank() + "-pid" + std::to_string(::getpid()) +
         ".txt";
}

void write_all(int fd, const std::string& text) noexcept {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// The signal handler only wakes the dumper thread: one write() to a non-blocking pipe.
std::atomic<int> g_wake_fd{-1};
std::atomic<int> g_wait_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_dump_signal(int) {
  const int saved = errno;
  const int fd = g_wake_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char byte = 1;
    (void)!::write(fd, &byte, 1);  // a full pipe means a dump is pending anyway
  }
  errno = saved;
}

// The live recorders of this process, for the dump signal. A second process-wide registry beside
// ProcessFailures: a signal reaches a process, not a communicator. Never destroyed (communicators
// in static storage may outlive it), and its dumper thread lives as long as the process.
class FlightRegistry {
 public:
  static FlightRegistry& instance() {
    static FlightRegistry* registry = [] {
      auto* r = new FlightRegistry;
      ::pthread_atfork([] { instance().mu_.lock(); }, [] { instance().mu_.unlock(); },
                       [] { instance().after_fork_in_child(); });
      return r;
    }();
    return *registry;
  }

  void add(FlightRecorder* recorder) {
    std::lock_guard lock(mu_);
    if (armed_pid_ != ::getpid()) arm_locked();
    recorders_.push_back(recorder);
  }

  void remove(FlightRecorder* recorder) {
    std::lock_guard lock(mu_);
    recorders_.erase(std::remove(recorders_.begin(), recorders_.end(), recorder), recorders_.end());
  }

 private:
  // Installs the handler (only over the default action: a program's own handler stays), starts
  // the dumper thread and tells a launcher reading the dump directory (or the store) that this pid
  // can be asked.
  void arm_locked() {
    armed_pid_ = ::getpid();
    int sig = 0;
    try {
      sig = dump_signal();  // checked already when the recorder was made
    } catch (const Error&) {
      return;
    }
    if (sig == 0) return;
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) return;
    const bool ours = !(old.sa_flags & SA_SIGINFO) && old.sa_handler == on_dump_signal;
    if (!ours && ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)) return;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    // The dumper takes no signals: they stay with the program's threads.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      std::thread([fd = fds[0]] { dumper_loop(fd); }).detach();
    } catch (...) {
      ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      ::close(fds[0]);
      ::close(fds[1]);
      return;
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    g_wait_fd.store(fds[0]);
    g_wake_fd.store(fds[1]);
    if (!ours) {
      struct sigaction action {};
      action.sa_handler = on_dump_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      ::sigaction(sig, &action, nullptr);
    }
    bool to_store = false;
    try {
      to_store = flight_dumps_go_to_store();  // checked already when the recorder was made
    } catch (const Error&) {
    }
    if (base::env_string("TPF_FLIGHT_RECORDER_DIR") || to_store) {
      write_flight_dump(std::string(kTag) + " armed pid=" + std::to_string(::getpid()) +
                        " world_rank=" + world_rank() + " signal=" + std::to_string(sig) + "\n");
    }
  }

  static void dumper_loop(int fd) {
    for (;;) {
      char bytes[64];
      const ssize_t n = ::read(fd, bytes, sizeof(bytes));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // closed after a fork: this thread belongs to the parent's copy
      std::string text;
      try {
        FlightRegistry& self = instance();
        std::lock_guard lock(self.mu_);
        for (const FlightRecorder* recorder : self.recorders_) text += recorder->format("signal");
        text += std::string(kTag) + " signal-done pid=" + std::to_string(::getpid()) + "\n";
      } catch (...) {
        continue;  // out of memory: nothing to dump
      }
      write_flight_dump(text);
    }
  }

  // The child of a fork has no dumper thread and must not wake its parent's: it re-arms when it
  // creates a communicator. The recorders it copied belong to communicators whose threads did
  // not survive the fork.
  void after_fork_in_child() {
    const int wake = g_wake_fd.exchange(-1);
    const int wait = g_wait_fd.exchange(-1);
    if (wake >= 0) ::close(wake);
    if (wait >= 0) ::close(wait);
    recorders_.clear();
    armed_pid_ = 0;
    mu_.unlock();
  }

  std::mutex mu_;
  std::vector<FlightRecorder*> recorders_;
  pid_t armed_pid_ = 0;
};

}  // namespace

std::string encode_rank_runs(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t last = i;  // the run ranks[i..last], of step `step`
    const int step = i + 1 < ranks.size() ? ranks[i + 1] - ranks[i] : 0;
    if (step > 0) {
      last = i + 1;
      while (last + 1 < ranks.size() && ranks[last + 1] - ranks[last] == step) ++last;
      if (step > 1 && last == i + 1) last = i;  // two of a step > 1: as two single ranks
    }
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (last > i) {
      out += '-';
      out += std::to_string(ranks[last]);
      if (step > 1) {
        out += '/';
        out += std::to_string(step);
      }
    }
    i = last + 1;
  }
  return out;
}

std::optional<std::vector<int>> decode_rank_runs(std::string_view text, size_t max_ranks) {
  std::vector<int> ranks;
  auto number = [&](std::string_view::size_type& at, int& out) {
    const char* first = text.data() + at;
    const auto [end, ec] = std::from_chars(first, text.data() + text.size(), out);
    if (ec != std::errc() || end == first || out < 0) return false;
    at = static_cast<size_t>(end - text.data());
    return true;
  };
  size_t at = 0;
  while (at < text.size()) {
    int first = 0, last = 0, step = 1;
    if (!number(at, first)) return std::nullopt;
    last = first;
    if (at < text.size() && text[at] == '-' && !number(++at, last)) return std::nullopt;
    if (at < text.size() && text[at] == '/' && !number(++at, step)) return std::nullopt;
    if (last < first || step < 1 || (last - first) % step != 0 ||
        static_cast<size_t>((last - first) / step) + 1 > max_ranks - ranks.size())
      return std::nullopt;
    for (int k = 0; k <= (last - first) / step; ++k) ranks.push_back(first + k * step);
    if (at < text.size() && (text[at] != ',' || ++at == text.size())) return std::nullopt;
  }
  return ranks;
}

const char* flight_state_name(FlightState state) noexcept {
  switch (state) {
    case FlightState::in_flight: return "in_flight";
    case FlightState::completed: return "completed";
    case FlightState::failed: return "failed";
  }
  return "unknown";
}

const char* error_code_token(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::mismatch: return "mismatch";
    case ErrorCode::peer_died: return "peer_died";
    case ErrorCode::aborted: return "aborted";
    case ErrorCode::resource: return "resource";
    case ErrorCode::bootstrap: return "bootstrap";
    case ErrorCode::system: return "system";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

void write_flight_dump(const std::string& text) noexcept {
  static std::mutex mu;  // one dump at a time per process: lines of two dumps never mix
  try {
    std::lock_guard lock(mu);
    if (flight_dumps_go_to_store()) {
      std::string why;
      if (append_flight_text_to_store(text, why)) return;
      write_all(STDERR_FILENO,
                "tpfabric: cannot put the flight recorder's dump into the job's store (" + why +
                    "); it follows here\n");
      write_all(STDERR_FILENO, text);
      return;
    }
    const std::string path = dump_path();
    if (!path.empty()) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        write_all(fd, text);
        ::close(fd);
        return;
      }
      write_all(STDERR_FILENO, "tpfabric: cannot write the flight recorder's dump to " + path +
                                   " (" + std::strerror(errno) +
                                   "; check TPF_FLIGHT_RECORDER_DIR); it follows here\n");
    }
    write_all(STDERR_FILENO, text);
  } catch (...) {
    // Out of memory while failing: the dump is lost, the error itself still reaches the caller.
  }
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(std::min(capacity, kMaxCapacity)), use_tsc_(TickClock::instance().tsc()) {
  if (capacity_ == 0) return;
  // A bad TPF_FLIGHT_RECORDER_SIGNAL or _STORE fails here, before anything is set up.
  (void)dump_signal();
  (void)flight_dumps_go_to_store();
  collectives_.entries = std::make_unique<Entry[]>(capacity_);
  messages_.entries = std::make_unique<Entry[]>(capacity_);
}

int64_t FlightRecorder::now_ticks() const noexcept { return use_tsc_ ? read_tsc() : now_ns(); }

FlightRecorder::~FlightRecorder() {
  if (attached_) FlightRegistry::instance().remove(this);
}

void FlightRecorder::attach(std::string comm_name, uint64_t generation, int rank, int size,
                            const std::vector<int>& job_ranks) {
  comm_name_ = token(comm_name);
  generation_ = generation;
  rank_ = rank;
  size_ = size;
  for (int r = 0; r < static_cast<int>(job_ranks.size()); ++r) {
    if (job_ranks[r] == r) continue;
    job_ranks_ = encode_rank_runs(job_ranks);  // only where a rank is renumbered
    break;
  }
  if (capacity_ == 0 || attached_) return;
  try {
    FlightRegistry::instance().add(this);
    attached_ = true;
  } catch (...) {
    // Out of memory: this communicator is left out of signal dumps; its own failures still dump.
  }
}

FlightRecorder::Slot FlightRecorder::begin(coll::OpKind kind, DType dtype, uint64_t count,
                                           int peer_or_root, uint64_t sequence) noexcept {
  if (capacity_ == 0) return kNoSlot;
  const uint32_t packed = pack(kind, dtype, FlightState::in_flight, ErrorCode::internal);
  return coll::is_point_to_point(kind) ? begin_message(packed, count, peer_or_root, sequence)
                                       : begin_collective(packed, count, peer_or_root, sequence);
}

void FlightRecorder::write_begin(Entry& e, uint64_t mine, uint32_t packed, uint64_t count, int peer,
                                 uint64_t sequence) const noexcept {
  std::atomic_thread_fence(std::memory_order_release);
  e.sequence.store(sequence, std::memory_order_relaxed);
  e.count.store(count, std::memory_order_relaxed);
  e.peer.store(peer, std::memory_order_relaxed);
  e.packed.store(packed, std::memory_order_relaxed);
  e.end_ticks.store(0, std::memory_order_relaxed);
  e.start_ticks.store(now_ticks(), std::memory_order_relaxed);
  e.stamp.store(mine | kPhaseBegun, std::memory_order_release);
}

FlightRecorder::Slot FlightRecorder::begin_collective(uint32_t packed, uint64_t count, int peer,
                                                      uint64_t sequence) noexcept {
  // The only writer of this ring: plain loads and stores, ordered for readers by the stamp.
  const uint64_t ticket = collectives_.next.load(std::memory_order_relaxed);
  collectives_.next.store(ticket + 1, std::memory_order_relaxed);
  Entry& e = collectives_.entries[ticket % capacity_];
  const uint64_t mine = (ticket + 1) << 2;
  e.stamp.store(mine | kPhaseWritingBegin, std::memory_order_relaxed);
  write_begin(e, mine, packed, count, peer, sequence);
  return ticket;
}

FlightRecorder::Slot FlightRecorder::begin_message(uint32_t packed, uint64_t count, int peer,
                                                   uint64_t sequence) noexcept {
  const uint64_t ticket = messages_.next.fetch_add(1, std::memory_order_relaxed);
  Entry& e = messages_.entries[ticket % capacity_];
  const uint64_t mine = (ticket + 1) << 2;
  uint64_t seen = e.stamp.load(std::memory_order_relaxed);
  for (int spins = 0;;) {
    if ((seen >> 2) > ticket + 1) return ticket | kMessageBit;  // a newer one got here first
    if ((seen & 1) == 0 &&
        e.stamp.compare_exchange_weak(seen, mine | kPhaseWritingBegin, std::memory_order_relaxed,
                                      std::memory_order_relaxed)) {
      break;
    }
    if (seen & 1) {
      cpu_relax(spins);
      seen = e.stamp.load(std::memory_order_relaxed);
    }
  }
  write_begin(e, mine, packed, count, peer, sequence);
  return ticket | kMessageBit;
}

void FlightRecorder::end(Slot slot, FlightState state, ErrorCode error) noexcept {
  if (slot == kNoSlot || capacity_ == 0) return;
  const bool message = (slot & kMessageBit) != 0;
  const uint64_t ticket = slot & ~kMessageBit;
  Entry& e = (message ? messages_ : collectives_).entries[ticket % capacity_];
  const uint64_t mine = (ticket + 1) << 2;
  if (message) {
    uint64_t expected = mine | kPhaseBegun;
    while (!e.stamp.compare_exchange_weak(expected, mine | kPhaseWritingEnd,
                                          std::memory_order_relaxed, std::memory_order_relaxed)) {
      if (expected != (mine | kPhaseBegun)) return;  // pushed out of the ring (or ended already)
    }
  } else {
    if (e.stamp.load(std::memory_order_relaxed) != (mine | kPhaseBegun)) return;
    e.stamp.store(mine | kPhaseWritingEnd, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  const uint32_t packed = e.packed.load(std::memory_order_relaxed) & 0xffffu;
  e.packed.store(packed | static_cast<uint32_t>(state) << 16 | static_cast<uint32_t>(error) << 24,
                 std::memory_order_relaxed);
  e.end_ticks.store(now_ticks(), std::memory_order_relaxed);
  e.stamp.store(mine | kPhaseEnded, std::memory_order_release);
}

void FlightRecorder::end(Slot slot, const std::exception_ptr& error) noexcept {
  if (slot == kNoSlot) return;
  if (!error) return end(slot, FlightState::completed);
  ErrorCode code = ErrorCode::internal;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    code = e.code();
  } catch (...) {
  }
  end(slot, FlightState::failed, code);
}

void FlightRecorder::dump_on_failure(ErrorCode code) noexcept {
  if (capacity_ == 0) return;
  if (code != ErrorCode::timeout && code != ErrorCode::mismatch && code != ErrorCode::peer_died &&
      code != ErrorCode::aborted) {
    return;
  }
  try {
    std::lock_guard lock(failure_dump_mu_);
    if (failure_dumped_) return;
    failure_dumped_ = true;
    write_flight_dump(format(error_code_token(code)));
  } catch (...) {
  }
}

void FlightRecorder::read_ring(const Ring& ring, std::vector<FlightRecord>& out) const {
  const size_t first = out.size();
  TickClock& clock = TickClock::instance();
  for (size_t i = 0; i < capacity_; ++i) {
    const Entry& e = ring.entries[i];
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const uint64_t before = e.stamp.load(std::memory_order_acquire);
      if (before == 0) break;  // never used
      if (before & 1) {
        std::this_thread::yield();
        continue;
      }
      FlightRecord r;
      r.id = (before >> 2) - 1;
      r.sequence = e.sequence.load(std::memory_order_relaxed);
      r.count = e.count.load(std::memory_order_relaxed);
      r.peer = e.peer.load(std::memory_order_relaxed);
      r.start_ns = e.start_ticks.load(std::memory_order_relaxed);
      r.end_ns = e.end_ticks.load(std::memory_order_relaxed);
      const uint32_t packed = e.packed.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (e.stamp.load(std::memory_order_relaxed) != before) continue;
      r.kind = static_cast<coll::OpKind>(packed & 0xff);
      r.dtype = static_cast<DType>((packed >> 8) & 0xff);
      r.state = static_cast<FlightState>((packed >> 16) & 0xff);
      r.error = static_cast<ErrorCode>((packed >> 24) & 0xff);
      r.start_ns = clock.to_ns(r.start_ns);
      r.end_ns = r.end_ns == 0 ? 0 : clock.to_ns(r.end_ns);
      out.push_back(r);
      break;
    }
  }
  std::sort(out.begin() + static_cast<ptrdiff_t>(first), out.end(),
            [](const FlightRecord& a, const FlightRecord& b) { return a.id < b.id; });
}

std::vector<FlightRecord> FlightRecorder::snapshot() const {
  std::vector<FlightRecord> out;
  if (capacity_ == 0) return out;
  out.reserve(2 * capacity_);
  read_ring(collectives_, out);
  read_ring(messages_, out);
  return out;
}

std::string FlightRecorder::format(std::string_view reason) const {
  const std::vector<FlightRecord> records = snapshot();
  const std::string who = "comm=" + comm_name_ + " generation=" + std::to_string(generation_) +
                          " rank=" + std::to_string(rank_);
  const std::string pid = std::to_string(::getpid());
  std::string text =
      std::string(kTag) + " begin " + who + " size=" + std::to_string(size_) + " pid=" + pid +
      " world_rank=" + world_rank() + " host=" + token(topo::hostname()) +
      (job_ranks_.empty() ? std::string() : " job_ranks=" + job_ranks_) +
      " reason=" + token(reason) +
      " now_ns=" + std::to_string(TickClock::instance().to_ns(now_ticks())) +
      " capacity=" + std::to_string(capacity_) +
      " collectives=" + std::to_string(collectives_.next.load(std::memory_order_relaxed)) +
      " messages=" + std::to_string(messages_.next.load(std::memory_order_relaxed)) + "\n";
  char line[320];
  for (const FlightRecord& r : records) {
    std::snprintf(line, sizeof(line),
                  "op id=%llu seq=%llu kind=%s dtype=%s count=%llu peer=%d state=%s error=%s "
                  "start_ns=%lld end_ns=%lld\n",
                  static_cast<unsigned long long>(r.id),
                  static_cast<unsigned long long>(r.sequence), coll::op_kind_name(r.kind),
                  dtype_name(r.dtype), static_cast<unsigned long long>(r.count), r.peer,
                  flight_state_name(r.state),
                  r.state == FlightState::failed ? error_code_token(r.error) : "-",
                  static_cast<long long>(r.start_ns), static_cast<long long>(r.end_ns));
    text += line;
  }
  // UCX's latest error lines in this process (not printed: transport/ucx_network.h), whatever
  // communicator they were about; readers take only the lines above.
  for (const std::string& said : transport::recent_ucx_errors()) text += "ucx " + said + "\n";
  text += std::string(kTag) + " end " + who + " pid=" + pid + "\n";
  return text;
}

}  // namespace tpf::detail
