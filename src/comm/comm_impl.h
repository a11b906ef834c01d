// The state behind a Communicator: its fabric and network, its queue of operations
// (comm/operation_queue.h), its point-to-point engines, its sequence counter and its error state.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coll/across_hosts.h"
#include "coll/op_desc.h"
#include "comm/flight_recorder.h"
#include "comm/heartbeat.h"
#include "comm/net_p2p.h"
#include "comm/operation_queue.h"
#include "comm/p2p_engine.h"
#include "comm/recent_calls.h"
#include "comm/settings.h"
#include "comm/store_deaths.h"
#include "comm/work_state.h"
#include "topo/hosts.h"
#include "tpf/comm.h"
#include "transport/shm_fabric.h"
#include "transport/ucx_network.h"

namespace tpf::detail {

struct CommSetup {
  int rank = 0;
  int size = 1;
  std::string name;                  // unique among the communicators on this store
  std::shared_ptr<Store> store;      // the job's store (not prefixed)
  std::string job_id;                // names the shared-memory segments
  std::shared_ptr<void> keep_alive;  // e.g. the store server rank 0 hosts
  // By rank: its rank in the job (the communicator made from the launcher's environment, or by
  // Communicator::create, that this one was split from); empty: the same numbers.
  std::vector<int> job_ranks;
  // Whether the store's clients declared these job ranks (a store tpf connected: from_env, or
  // create() from an address), so that a split may wait on its members' alone (its setup then
  // ignores a death elsewhere in the job); a store of the user's own may number them otherwise.
  bool store_knows_job_ranks = false;
  CommOptions options;               // as the user gave them (a split's child inherits them)
  // The name a shrink's child is named after: that of the first communicator of its line (a
  // shrink's child keeps its parent's); empty: `name`. So ranks that shrink different
  // communicators of one line to the same ranks meet under one name (CommImpl::shrink).
  std::string lineage;
  CommSettings settings;             // resolved from `options` and the environment
};

// The peers on other hosts a rank connects to while a communicator across hosts is made
// (transport::NetworkConfig::connect_first): its rail (the leaders' rail carries every
// collective's fingerprints and what crosses through the leaders; the other rails, what crosses
// per rail) and its heartbeat's pairs (the watcher it beats to; a leader, the ranks it watches).
// Symmetric, as connect_first must be; every other pair (a root off the leaders, point-to-point)
// connects on first use.
std::vector<int> first_network_peers(const topo::HostMap& hosts, int rank);

class CommImpl {
 public:
  explicit CommImpl(CommSetup setup);
  ~CommImpl();
  CommImpl(const CommImpl&) = delete;
  CommImpl& operator=(const CommImpl&) = delete;

  int rank() const noexcept { return setup_.rank; }
  int size() const noexcept { return setup_.size; }
  int host_count() const noexcept { return hosts_.hosts(); }
  int host_of(int rank) const;
  int job_rank(int rank) const;
  int ranks_on_machine() const { return hosts_.ranks_on_machine_of(setup_.rank); }
  const std::string& name() const noexcept { return setup_.name; }
  uint64_t next_sequence() const;

  // Validates, then queues the operation (comm/operation_queue.h; point-to-point operations: for
  // the point-to-point engine).
  Work submit_async(const coll::OpDesc& desc, const CallOptions& call);
  // Validates and runs the operation on the calling thread when nothing is queued (no hand-off,
  // no allocation: the small-message latency path); otherwise queues it and waits.
  void run_blocking(const coll::OpDesc& desc, const CallOptions& call);
  using RunCollective = OperationQueue::RunCollective;
  // Queues several collectives as one operation (all_to_allv: its counts, then its data), in
  // issue order with the rest; `body` runs them through the RunCollective it is given. `name`
  // names the operation in errors.
  Work submit_composite(const char* name, std::function<void(const RunCollective&)> body,
                        const CallOptions& call);
  std::unique_ptr<CommImpl> split(int color, int key, const CommOptions& options);
  // Communicator::shrink: the ranks of this communicator that the job's store does not know dead
  // or lost, in their order here, made into a communicator without this one's collectives.
  std::unique_ptr<CommImpl> shrink(const CommOptions& options);
  void abort();

 private:
  using Task = OperationQueue::Task;
  // The job ranks of this communicator's `ranks`, in their order.
  std::vector<int> job_ranks_of(const std::vector<int>& ranks) const;
  // A child's options (split, shrink): `options`, with what they leave unset from this one's.
  CommOptions child_options(const CommOptions& options) const;
  // This communicator's ranks whose job ranks the store knows dead or lost, ascending.
  std::vector<int> dead_members() const;
  // This communicator's failure, where it is one that no death or loss causes (a mismatch).
  std::optional<transport::FailureRecord> failure_no_death_explains() const;
  // dead_members(), where this communicator failed or was aborted once the store knows of a
  // death among them (the failure, or a peer's abort that followed a death, may reach this rank
  // before the store learns of the death), waiting until `deadline` at most.
  std::vector<int> dead_members_after_failure(Clock::time_point deadline) const;
  // The creation after the communicator's store is known: hosts, settings, shared memory, the
  // network, the heartbeat (`scoped_store`: this generation's keys).
  void join(const std::shared_ptr<Store>& scoped_store, uint64_t generation);
  // Queues the task with the call's deadline.
  Work enqueue(Task task, const CallOptions& call);
  // The next sequence number. Numbers are taken when an operation starts; operations start in
  // issue order (operation_queue.h).
  uint64_t take_sequence() noexcept;
  // Runs one operation and returns its failure, if any (and marks the communicator broken). It
  // must end by `deadline` if given, else within `timeout` of its first wait that blocks.
  std::exception_ptr run(const coll::OpDesc& desc, uint64_t sequence,
                         std::optional<Clock::time_point> deadline,
                         std::chrono::milliseconds timeout);
  // The call's timeout, else the communicator's; `what` names the operation in errors.
  std::chrono::milliseconds timeout_of(const char* what, const CallOptions& call) const;
  // Runs a queued task, on whichever thread took it.
  std::exception_ptr run_task(const Task& task);
  std::exception_ptr run_composite(const Task& task);
  void validate(const coll::OpDesc& desc) const;
  // Several hosts: whether `peer` shares this rank's host, and a send/recv in the host's numbering.
  bool same_host(int peer) const;
  coll::OpDesc on_this_host(const coll::OpDesc& desc) const;
  std::string label(const coll::OpDesc& desc, uint64_t sequence) const;
  // Across hosts, before the communicator goes: its leader compares the stamps of its last
  // checkpoint if it has not yet (coll::settle_checkpoints), bounded by the communicator's
  // timeout; what that finds is recorded as the communicator's failure, which its peers are told.
  void settle_checkpoints() noexcept;
  // What the collectives across hosts work with (network_ set).
  coll::HostGroup host_group();
  // Keeps `error` as the communicator's failure if it is the first (peers are told, and so are the
  // other communicators of this process) and returns the first failure's error, which pending
  // and later operations report. A loss this rank found also goes to the job's store
  // (report_loss_to_store).
  std::exception_ptr record_failure(std::exception_ptr error);
  // record_failure but for the store: does nothing on an aborted communicator.
  std::exception_ptr keep_failure(std::exception_ptr error);
  // Tells the ranks on other hosts of this rank's failure (network_ set): notices, and the record
  // in the communicator's store, which is there before this returns (bounded), so that a process
  // that exits after its failure leaves it.
  void tell_other_hosts(const transport::FailureRecord& record);
  // Fails the communicator with `root` where one of its other ranks is the process `root` found
  // lost (comm/process_failures.h).
  void fail_if_holding_lost_process(const transport::FailureRecord& root);
  // This communicator's rank whose process is `process` (a base::this_process_token), if any.
  std::optional<int> rank_of_process(uint64_t process) const;
  // Where `error` is this rank finding one of its ranks lost (its heartbeat, or a wait on a
  // stopped peer of its host): tells the job's store (Store::report_lost), so that every rank
  // waiting there for what the lost process would set (a communicator being made, now or later)
  // fails at once naming it, not at its deadline, and `tpf run --keep-going` ends it. Only the
  // ranks that found the loss report it, not every rank that hears of it.
  void report_loss_to_store(std::exception_ptr error) noexcept;

  CommSetup setup_;
  topo::HostMap hosts_;  // which of the ranks share memory (topo/hosts.h)
  std::vector<uint64_t> processes_;  // by rank: its process's token (base/process_token.h)
  transport::RankNames names_;       // how messages name ranks (from setup_.job_ranks)
  // Flight recorder (issue 15): the last operations, dumped on failure or on the dump signal.
  // Declared before fabric_ and p2p_: it outlives everything that records into it.
  FlightRecorder recorder_;
  std::unique_ptr<transport::ShmFabric> fabric_;
  std::shared_ptr<P2pEngine> p2p_;  // declared after fabric_: destroyed before it
  // While the communicator is made across hosts: the peers the job's store holds lost, for the
  // network's waits (comm/store_deaths.h); null once it is made (the heartbeat watches then).
  // Declared before network_, which asks it (its teardown too).
  std::unique_ptr<StoreDeaths> store_deaths_;
  // The ranks on other hosts; null when every rank is on this one (coll/across_hosts.h).
  std::unique_ptr<transport::UcxNetwork> network_;
  std::shared_ptr<NetP2p> net_p2p_;       // send/recv to other hosts; declared after network_
  coll::HostScratch host_scratch_;        // buffers the collectives across hosts reuse
  coll::UncomparedCalls uncompared_;      // calls across hosts not compared yet; the last stamp
  std::unique_ptr<coll::RootedCredit> rooted_credit_;  // across hosts: what waits unread
  coll::NetworkChoices network_choices_;  // the cost model's choices across hosts, remembered
  RecentCalls recent_calls_;              // across hosts: what the heartbeat tells and compares
  // Names a stopped or unreachable rank on another host; declared last: stopped first.
  std::unique_ptr<Heartbeat> heartbeat_;
  std::chrono::milliseconds default_timeout_;

  std::shared_ptr<OperationQueue> queue_;  // its tasks call into this communicator: stopped first
  std::atomic<uint64_t> sequence_{0};
  mutable std::mutex mu_;  // guards splits_ and the failure below
  uint64_t splits_ = 0;
  // The first failure (its root cause): the communicator is unusable after it.
  transport::FailureRecord failure_;
  std::exception_ptr first_error_;   // the error of that first failure
  std::atomic<bool> failed_{false};  // failure_ is set (readable without the lock)
  std::atomic<bool> aborted_{false};
};

}  // namespace tpf::detail
