// Finds a peer process on this host lost when it stays stopped (a stop signal, a debugger holding
// it): the one-host twin of the heartbeat (comm/heartbeat.h), which finds a stopped rank of a
// communicator across hosts by its silence (and so owns those: this runs in communicators of one
// host only, for peers no heartbeat of the process watches; CommImpl::join). A stopped process
// holds every rank that waits for it until the operation's deadline, and the job cannot go on
// without it (a shrink leaves out dead or lost ranks only, and `tpf run --keep-going` ends only a
// rank reported lost), so a peer seen stopped for `lost_after` (TPF_HOST_LOST_S) is found lost, as
// the heartbeat finds one.
//
// Only the ranks that wait on a peer look at it (ShmFabric::check_stopped, between the slices of a
// wait, and of the setup's waits once the peer's pid is known), each peer at most every
// look_every(lost_after) (a read of /proc/<pid>/stat). The time counts from the first look that
// saw it stopped; a look that sees it running starts it again.
// Thread-safe: a collective's wait and the point-to-point engine may look at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/peer_process.h"

namespace tpf::transport {

class StoppedPeers {
 public:
  using Clock = std::chrono::steady_clock;
  // `ranks`: the fabric's ranks (peers are numbered as there). `lost_after` zero: none is ever
  // found lost.
  StoppedPeers(int ranks, std::chrono::milliseconds lost_after);

  // How long `process`, rank `peer`'s, has been seen stopped, once that reaches lost_after;
  // nullopt before (and between looks). The clock is read only where a peer may be found lost.
  std::optional<std::chrono::milliseconds> lost_for(int peer, const PeerProcess& process) const {
    if (lost_after_.count() <= 0) return std::nullopt;
    return lost_for(peer, process, Clock::now());
  }
  // The same at `now` (tests give their own clock).
  std::optional<std::chrono::milliseconds> lost_for(int peer, const PeerProcess& process,
                                                    Clock::time_point now) const {
    if (!look_due(peer, now)) return std::nullopt;
    return seen(peer, process.stopped(), now);
  }
  // The two halves of lost_for, for a watcher that looks its own way (`tpf run` reads a whole
  // process group's state, cli/stopped_ranks.h). Whether a look at `peer` is due at `now`; if so,
  // the next one is due look_every() later.
  bool look_due(int peer, Clock::time_point now) const;
  // Takes a look at `peer` made at `now` (`stopped`: what it saw) and says, as lost_for does, how
  // long it has been seen stopped once that reaches lost_after.
  std::optional<std::chrono::milliseconds> seen(int peer, bool stopped,
                                                Clock::time_point now) const;
  std::chrono::milliseconds lost_after() const noexcept { return lost_after_; }
  // A tenth of lost_after, within [10 ms, 1 s]: the found-lost time overshoots by at most that.
  static std::chrono::milliseconds look_every(std::chrono::milliseconds lost_after);

 private:
  struct Watch {
    std::atomic<int64_t> next_look{0};      // Clock ticks
    std::atomic<int64_t> stopped_since{0};  // Clock ticks; 0: not seen stopped
  };
  std::chrono::milliseconds lost_after_;
  std::chrono::milliseconds look_every_;
  std::unique_ptr<Watch[]> watches_;
};

// What a rank that finds a stopped process lost says of it: "rank 2 (pid 4242) has been stopped
// for 10.0 s (a stop signal, or a debugger holding it): found lost (TPF_HOST_LOST_S = 10.0 s)",
// with `who` "rank 2"; "(pid 4242 on host 'c')" where `host` names the process's machine (`tpf
// run --hosts`). The one spelling, whoever finds it (a waiting rank, `tpf run`).
std::string stopped_lost_text(const std::string& who, int64_t pid,
                              std::chrono::milliseconds stopped_for,
                              std::chrono::milliseconds lost_after, const std::string& host = "");
// What a rank says of a peer whose process exited while a communicator was made: "rank 2 (pid
// 4242) died (its process exited or was killed) while creating the communicator (CONTEXT)".
std::string died_while_creating_text(const std::string& who, int64_t pid,
                                     const std::string& context);
// Why a process is stopped, as messages say it: "a stop signal, or a debugger holding it".
inline constexpr const char* kStoppedHow = "a stop signal, or a debugger holding it";

}  // namespace tpf::transport
