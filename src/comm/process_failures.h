// What this process knows of failures across its communicators. Communicators are independent,
// but two things learnt on one of them hold for all:
// - The process's first failure. A process that fails on one communicator usually exits, and the
//   peers it shares other communicators with then see only that it died. So the first failure is
//   noted in the segment of every communicator the process holds: those peers report the root
//   cause, not a death that follows from it.
// - The processes found lost (FailureRecord::lost_process: a stopped process, or one on a host
//   cut off, named by a heartbeat). No communicator holding such a process can finish a call with
//   it, and its watcher may have left the others (a split whose watcher failed on its parent
//   first waited out its deadline), so every live communicator that holds it fails at once with
//   that record; and none waits any more for what the lost process would have to answer
//   (UcxNetwork's acknowledgements of failure notices, its flushing closes).
// (The one process-wide registry of the library: it spans communicators by nature.)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "transport/shm_fabric.h"

namespace tpf::detail {

class ProcessFailures {
 public:
  static ProcessFailures& instance();

  // Called with the record of each process loss the process learns, once per lost process.
  using OnProcessLost = std::function<void(const transport::FailureRecord&)>;
  // A live communicator: its fabric gets the note at once if a failure came first; `on_lost`
  // hears of the losses learnt from now on (called under this registry's lock: it may record a
  // failure in turn, which comes back here). `heartbeat_watched`: the processes of a
  // communicator across hosts, whose heartbeat watches every one of them.
  void add(transport::ShmFabric* fabric, OnProcessLost on_lost = {},
           std::vector<uint64_t> heartbeat_watched = {});
  void remove(transport::ShmFabric* fabric);
  // Keeps `root` if it is the process's first failure and notes it in every live fabric; where it
  // names a lost process not known before, notes that and tells every live communicator.
  void record(const transport::FailureRecord& root);
  // The process's first failure, if it met one.
  std::optional<transport::FailureRecord> first();
  // The process goes on past its failures (Communicator::shrink): communicators made from now on
  // carry no note of them, so that their peers name this process's later failures, not an old one.
  // The processes found lost stay lost.
  void go_on();
  // The first record this process learnt that named `process` (a base::this_process_token) lost,
  // if one did. Takes only a lock of its own: the network layer asks it with its own lock held.
  std::optional<transport::FailureRecord> lost(uint64_t process);
  // Whether a heartbeat watches `process`: a live communicator across hosts of this process holds
  // it. That heartbeat owns finding it stopped, not a communicator of one host that holds it too
  // (transport/stopped_peers.h): one finder, one way of naming the loss. Takes only a lock of its
  // own: shared-memory waits ask it.
  bool watched_by_heartbeat(uint64_t process);

 private:
  // A forked child starts with none of this: its parent's failure and communicators are not its
  // own (writing a note into an inherited mapping would reach the parent's peers).
  void forget_if_forked();

  struct Member {
    transport::ShmFabric* fabric;
    OnProcessLost on_lost;
    std::vector<uint64_t> heartbeat_watched;
  };
  std::recursive_mutex mu_;  // recursive: an on_lost callback records its communicator's failure
  pid_t pid_ = 0;            // the process the state belongs to
  std::vector<Member> members_;
  std::optional<transport::FailureRecord> first_;
  std::mutex lost_mu_;  // guards lost_ only, and is never held while calling out
  // By lost process. Kept by a forked child, unlike the rest: those processes are lost to it too.
  std::map<uint64_t, transport::FailureRecord> lost_;
  std::mutex watched_mu_;            // guards watched_ only, and is never held while calling out
  std::map<uint64_t, int> watched_;  // process -> live members whose heartbeat watches it
};

}  // namespace tpf::detail
