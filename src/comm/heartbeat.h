// Liveness of the ranks of a communicator that spans hosts. UCX over TCP reports a peer whose
// process died within milliseconds, but not one that is stopped or whose host dropped off the
// network (measured: not in 90 s, even with UCX's keepalive at 1 s); without this, only the
// operation's deadline would end such a wait, and a communicator with no operation in flight
// would not notice at all.
//
// Every rank sends a beat (UcxNetwork::send_beat) once per period to its watcher, the
// leader of the previous host; each host's leader watches the ranks of the next host (a ring: one
// message per rank per period, whatever the job's size) and reports a rank it has not heard from
// for `lost_after` as stopped or unreachable, naming it and its host. A rank that destroys its
// communicator says goodbye, so a rank that left is not taken for lost. The beats travel the
// links whose loss they detect; the store (issue 10 suggested it) would not do: its client
// serializes calls, so a rank blocked in a long rendezvous read (a split waiting for a late rank)
// would fall silent and be named lost while healthy. (While a communicator is made, before this
// starts, the store does judge silence, from beats on a connection of their own:
// comm/store_deaths.h.)
//
// The same thread progresses the network at most every UcxNetwork::kPushEvery (20 ms), so a failure
// notice from another host reaches a rank that is blocked in shared memory within about 20 ms
// (`on_failure` then fails the communicator, which records the failure in the host's shared
// memory, where a host-mate whose own connection to the failed rank was cut finds its cause:
// UcxNetwork::set_host_failures; until 2026-12-05 this took a period, 2 s by default, longer than
// that host-mate waits for a cause), and pushes on what UCX holds of sends that their sender did
// not wait for (UcxNetwork::push_unsent: a small broadcast's root, a reduce's sender go on; the
// tail of a message a full socket did not take waits in UCX's buffer for the worker's progress), so
// it reaches its peer while the sender computes, within about 20 ms of the socket having room.
// Where nothing is left to push it sleeps until the network has news (a notice, a beat: the
// worker's event descriptor), a send starts, or the next beat is due: an idle communicator takes
// no rounds (until 2026-12-05 it took 50 a second, each an epoll_wait: about 1 ms of CPU per second
// per communicator, which with 300 communicators of 8 ranks took both cores of this machine).
//
// Each beat also carries the collective the rank is in (comm/recent_calls.h), and the watcher
// compares it with its own call at that sequence number: a difference is a mismatch. The
// fingerprints the leaders exchange find almost every mismatch at once, and name more (network
// algorithms, sizes); this is the backstop for waits they cannot end (leaders that disagree on a
// small broadcast's root, each waiting for another to send). So it compares only a call that
// kInCallBeats beats in a row reported, one that has lasted a period at least: a call the
// fingerprints will fail in a moment is theirs to report.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/recent_calls.h"
#include "topo/hosts.h"
#include "transport/ucx_network.h"

namespace tpf::detail {

class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;
  struct Config {
    int rank = 0;
    topo::HostMap hosts;
    std::string label;  // "communicator 'w'", for errors
    std::chrono::milliseconds lost_after{10000};
    const RecentCalls* calls = nullptr;  // this rank's: sent with each beat, compared with theirs
    std::vector<uint64_t> processes;     // by rank: its process's token, which a loss names
  };
  // `on_failure` gets the first failure the heartbeat meets (a lost rank, or a failure notice
  // from another host), once; the thread then only beats.
  Heartbeat(Config config, transport::UcxNetwork& network,
            std::function<void(std::exception_ptr)> on_failure);
  // Says goodbye to the watcher.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The ranks `rank` watches: every rank of the next host if it leads its host, none otherwise.
  static std::vector<int> watched_by(const topo::HostMap& hosts, int rank);
  // The rank that watches `rank`: the leader of the previous host.
  static int watcher_of(const topo::HostMap& hosts, int rank);
  // Beats per lost_after: a rank is named after missing this many in a row.
  static constexpr int kBeatsPerLoss = 5;
  // Beats in a row that must report the same call before the watcher compares it with its own.
  static constexpr int kInCallBeats = 2;

 private:
  void run();
  // Throws Error(timeout) naming the first watched rank not heard from for lost_after, or
  // Error(mismatch) naming one whose latest beat says it is in another call than this rank's at
  // the same sequence number.
  void watch(Clock::time_point now);
  // Compares a watched rank's call with this rank's once kInCallBeats beats reported it.
  void compare_calls(int rank, const transport::UcxNetwork::Heard& heard);

  Config config_;
  transport::UcxNetwork& network_;
  std::function<void(std::exception_ptr)> on_failure_;
  std::vector<int> watched_;
  // Per watched rank: the call its beats report, the latest such beat, and how many in a row.
  struct InCall {
    transport::Fingerprint call{};
    Clock::time_point beat{};
    int beats = 0;
  };
  std::map<int, InCall> in_call_;
  int watcher_;
  Clock::time_point started_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int stop_fd_ = -1;  // an eventfd: wakes the thread from its sleep on the network
  std::thread thread_;
};

}  // namespace tpf::detail
