#include "comm/comm_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <vector>

#include "base/open_files.h"
#include "base/process_token.h"
#include "bootstrap/awaited_ranks_store.h"
#include "coll/across_hosts.h"
#include "coll/algorithms.h"
#include "coll/network_cost.h"
#include "comm/creation_barrier.h"
#include "comm/creation_watch.h"
#include "comm/host_discovery.h"
#include "comm/name_generations.h"
#include "comm/net_p2p.h"
#include "comm/open_file_room.h"
#include "comm/process_failures.h"
#include "comm/settings_agreement.h"
#include "tpf/error.h"
#include "transport/asymmetric_fence.h"
#include "transport/failure_board.h"
#include "transport/stopped_peers.h"

namespace tpf::detail {
namespace {

// Far beyond any real buffer, small enough that size * count * element size cannot overflow.
constexpr size_t kMaxBufferBytes = size_t{1} << 46;
// How long a failure waits for its record to reach the store (transport::FailureBoard) before it
// returns: a store round trip or two where the store answers; a store that does not costs this.
constexpr std::chrono::seconds kFailurePublishWait{2};

// Segment names allow only a few characters; communicator names may contain anything.
std::string sanitize(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += plain ? c : '_';
  }
  if (out.size() > 64)
    out = out.substr(0, 40) + "_" + std::to_string(std::hash<std::string>{}(text));
  return out;
}

// `ranks_on_machine`: the ranks sharing this rank's cores, whichever host each is on (emulated
// hosts of one machine share them).
transport::FabricConfig fabric_config(const CommSetup& setup, uint64_t generation,
                                      std::shared_ptr<Store> scoped_store, int ranks_on_machine) {
  transport::FabricConfig config;
  config.rank = setup.rank;
  config.size = setup.size;
  const CommSettings& settings = setup.settings;
  config.slot_bytes = settings.slot_bytes;
  config.segment_prefix = transport::shm_job_prefix(setup.job_id) + sanitize(setup.name) + "-g" +
                          std::to_string(generation) + "-";
  config.label = "communicator '" + setup.name + "'";
  config.store = std::move(scoped_store);
  config.setup_timeout = settings.setup_timeout;
  config.excess_ranks = settings.excess_ranks(ranks_on_machine);
  config.asymmetric_fences = settings.asymmetric_fences;
  config.describe = coll::describe_fingerprint;
  config.names = transport::RankNames(setup.job_ranks);
  return config;
}

}  // namespace

std::vector<int> first_network_peers(const topo::HostMap& hosts, int rank) {
  std::vector<int> first = hosts.rail_of(rank);
  first.push_back(Heartbeat::watcher_of(hosts, rank));
  for (int watched : Heartbeat::watched_by(hosts, rank)) first.push_back(watched);
  std::sort(first.begin(), first.end());
  first.erase(std::unique(first.begin(), first.end()), first.end());
  return first;
}

CommImpl::CommImpl(CommSetup setup)
    : setup_(std::move(setup)),
      names_(setup_.job_ranks),
      recorder_(setup_.settings.flight_recorder_size),
      default_timeout_(setup_.settings.timeout),
      queue_(std::make_shared<OperationQueue>(
          setup_.settings.asymmetric_fences && transport::register_asymmetric_fences(),
          [this](const Task& task) { return run_task(task); }, setup_.name)) {
  if (setup_.size < 1 || setup_.rank < 0 || setup_.rank >= setup_.size) {
    throw Error(ErrorCode::invalid_argument,
                "communicator '" + setup_.name + "': rank " + std::to_string(setup_.rank) +
                    " is outside [0, size=" + std::to_string(setup_.size) + ")");
  }
  // Until its ranks watch each other (the heartbeat starts once it is made), a rank stopped while
  // the communicator is made is found by the store, from the silence of its beats
  // (comm/store_deaths.h).
  std::shared_ptr<void> keeping_alive;
  if (setup_.size > 1 && setup_.settings.host_lost_after.count() > 0)
    keeping_alive = setup_.store->keep_alive(store_silence_limit(setup_.settings.host_lost_after));
  // Keys never collide when a name is used again, nor after a failed creation under it.
  const uint64_t generation = take_generation(*setup_.store, setup_.name, setup_.size);
  std::shared_ptr<Store> scoped_store =
      std::make_shared<PrefixStore>(generation_prefix(setup_.name, generation), setup_.store);
  // A split knows its members' job ranks: a death or loss of another rank of the job does not
  // end its waits (a communicator made by create() has members the store cannot know yet).
  if (!setup_.job_ranks.empty() && setup_.store_knows_job_ranks)
    scoped_store = std::make_shared<bootstrap::AwaitedRanksStore>(scoped_store, setup_.job_ranks);
  // The creation's waits end at once where another rank's creation failed (comm/creation_watch.h).
  const auto creation_store =
      std::make_shared<CreationWatchStore>(scoped_store, "communicator '" + setup_.name + "'");
  try {
    join(creation_store, generation);
    creation_store->creation_done();
  } catch (...) {
    // A rank that fails here leaves its peers connecting to it, or waiting for its first message,
    // to find its connection gone: they look for a recorded cause before they name it lost
    // (UcxNetwork's failure board), so it records why it left, in the same place. The process's
    // other communicators keep it as a failure met first: where the process leaves them or exits
    // now, their peers name this cause (the parent of a split that failed, say).
    const transport::FailureRecord root = transport::root_of(std::current_exception());
    // First: those who try again under this name meet in the next generation.
    abandon_generation(*setup_.store, setup_.name, generation);
    if (network_) network_->creation_failed();
    ProcessFailures::instance().record(root);
    report_loss_to_store(std::current_exception());  // where this rank found a peer lost
    transport::FailureBoard board(scoped_store);
    board.publish(root);
    board.await_published(kFailurePublishWait);
    throw;
  }
}

void CommImpl::join(const std::shared_ptr<Store>& scoped_store, uint64_t generation) {
  const std::string comm_label = "communicator '" + setup_.name + "'";
  const JoiningRank joining{setup_.settings.host_key,
                            setup_.settings.net_devices,
                            encode_shared_settings(shared_settings(setup_.settings)),
                            base::encode_open_files(base::open_files()),
                            base::this_process_token(),
                            static_cast<int64_t>(::getpid())};
  DiscoveredRanks discovered = discover_hosts(
      *scoped_store, setup_.rank, setup_.size, joining,
      {setup_.settings.setup_timeout, comm_label, names_, setup_.settings.host_lost_after});
  hosts_ = std::move(discovered.hosts);
  processes_ = std::move(discovered.processes);
  // Before anything is mapped or connected: every rank fails here alike.
  check_shared_settings(discovered.shared_settings, hosts_, comm_label);
  check_open_file_room(discovered.open_files, hosts_, comm_label);
  make_room_for_communicator(hosts_, setup_.rank);
  transport::FabricConfig config =
      fabric_config(setup_, generation, scoped_store, ranks_on_machine());
  config.processes = processes_;
  config.pids = discovered.pids;
  // A stopped rank is found lost by one owner: across hosts the heartbeat watches every rank (each
  // host's by the previous host's leader), in this communicator or in another of the process that
  // holds it (a world across hosts over this group of one host); otherwise the ranks waiting on it.
  // This communicator's heartbeat starts once it is made: until then its host-mates look.
  config.setup_stopped_lost_after = setup_.settings.host_lost_after;
  if (hosts_.single_host()) config.stopped_lost_after = setup_.settings.host_lost_after;
  config.watched_elsewhere = [](uint64_t process) {
    return ProcessFailures::instance().watched_by_heartbeat(process);
  };
  if (!hosts_.single_host()) {
    // Shared memory joins this host's ranks only (numbered by local rank, with keys and segment
    // names of their own); the network joins this rank to every rank on another host.
    const int host = hosts_.host_of(setup_.rank);
    config.rank = hosts_.local_rank(setup_.rank);
    config.size = static_cast<int>(hosts_.ranks_on(host).size());
    // Appended piece by piece: GCC 12 gives a false -Wrestrict for "h" + to_string(...) + "-".
    config.segment_prefix += 'h';
    config.segment_prefix += std::to_string(host);
    config.segment_prefix += '-';
    config.store = std::make_shared<PrefixStore>("host" + std::to_string(host), scoped_store);
    config.label += " on host '" + hosts_.key(host) + "'";
    config.comm_ranks = hosts_.ranks_on(host);
    transport::NetworkConfig net;
    net.rank = setup_.rank;
    net.size = setup_.size;
    for (int r = 0; r < setup_.size; ++r)
      if (hosts_.host_of(r) != host) net.peers.push_back(r);
    if (!setup_.settings.net_connect_all)
      net.connect_first = first_network_peers(hosts_, setup_.rank);
    net.put_peers = coll::rail_partners(hosts_, setup_.rank);
    net.store = scoped_store;
    net.label = comm_label;
    net.setup_timeout = setup_.settings.setup_timeout;
    net.transports = setup_.settings.net_transports;
    net.devices = discovered.devices.at(setup_.rank);
    net.protocol = setup_.settings.net_protocol;
    net.eager_bytes = coll::kNetworkEagerBytes;
    net.oversubscribed = config.excess_ranks > 0;
    net.notice_wait = setup_.settings.net_notice_wait;
    // processes_ outlives network_ (declared before it). While the communicator is made, what
    // the store knows ends the network's first waits too.
    const std::chrono::milliseconds lost_after = setup_.settings.host_lost_after;
    store_deaths_ = std::make_unique<StoreDeaths>(
        *setup_.store, lost_after.count() > 0
                           ? transport::StoppedPeers::look_every(store_silence_limit(lost_after))
                           : CreationWatchStore::kLookEvery);
    net.peer_lost = [this](int r) -> std::optional<transport::FailureRecord> {
      if (auto lost = ProcessFailures::instance().lost(processes_[r])) return lost;
      if (!store_deaths_) return std::nullopt;
      std::optional<std::string> said = store_deaths_->dead(names_.job_rank(r));
      if (!said) return std::nullopt;
      return transport::FailureRecord{ErrorCode::peer_died, *said, processes_[r]};
    };
    net.names = names_;
    for (int r = 0; r < setup_.size; ++r) {
      net.process_names.push_back(
          (discovered.pids.at(r) > 0 ? "pid " + std::to_string(discovered.pids.at(r)) + " " : "") +
          "on host '" + hosts_.key(hosts_.host_of(r)) + "'");
    }
    network_ = std::make_unique<transport::UcxNetwork>(std::move(net));
    rooted_credit_ = std::make_unique<coll::RootedCredit>(hosts_.hosts());
    net_p2p_ = std::make_shared<NetP2p>(*network_, setup_.size, setup_.name, recorder_,
                                        [this](std::exception_ptr e) { return record_failure(e); });
  }
  fabric_ = std::make_unique<transport::ShmFabric>(std::move(config));
  // A connection that fails may have failed because of what a host-mate learnt (the fabric,
  // declared before the network, outlives it).
  if (network_) network_->set_host_failures([f = fabric_.get()] { return f->peer_failure(); });
  p2p_ = std::make_shared<P2pEngine>(*fabric_, setup_.name, recorder_,
                                     [this](std::exception_ptr e) { return record_failure(e); });
  recorder_.attach(setup_.name, generation, setup_.rank, setup_.size,  // flight recorder
                   setup_.job_ranks);
  if (network_) {
    await_every_rank_made(*scoped_store, setup_.rank, setup_.size, setup_.settings.setup_timeout,
                          comm_label, names_);
    store_deaths_.reset();  // the heartbeat watches from here
    heartbeat_ = std::make_unique<Heartbeat>(
        Heartbeat::Config{setup_.rank, hosts_, comm_label, setup_.settings.host_lost_after,
                          &recent_calls_, processes_},
        *network_, [this](std::exception_ptr e) { record_failure(e); });
  }
  // Last, once nothing can throw: a communicator whose constructor threw is never removed.
  ProcessFailures::instance().add(
      fabric_.get(),
      [this](const transport::FailureRecord& root) { fail_if_holding_lost_process(root); },
      heartbeat_ ? processes_ : std::vector<uint64_t>{});
}

CommImpl::~CommImpl() {
  heartbeat_.reset();  // its failures reach everything below
  ProcessFailures::instance().remove(fabric_.get());
  // Runs nothing after this (a waiter may still hold the queue) and fails what is still queued.
  queue_->stop();
  settle_checkpoints();
  // After the queue, whose failures reach it: fails its pending transfers. A waiter may still
  // hold it; the fabric goes below.
  if (p2p_) p2p_->stop();
  p2p_.reset();
  if (net_p2p_) net_p2p_->stop();  // a waiter may still hold it; the network goes below
  net_p2p_.reset();
  // Nothing more goes to or comes from the peers: those waiting on this rank in an operation it
  // will never join fail at once, naming it, instead of at their deadlines (a failed
  // communicator told them its failure instead).
  fabric_->leave();
  if (network_ && !failed_.load() && !aborted_.load())
    network_->leave(ProcessFailures::instance().first());
}

void CommImpl::settle_checkpoints() noexcept {
  if (!network_ || failed_.load()) return;
  try {
    const transport::WaitContext ctx = transport::WaitContext::with_timeout(
        timeout_of("destroying the communicator", {}),
        [this] { return "destroying communicator '" + setup_.name + "'"; });
    coll::settle_checkpoints(host_group(), sequence_.load(), ctx);
  } catch (...) {
    // Destroying cannot throw: the failure (a mismatch in the last calls, a peer that failed or
    // never came) is recorded, which tells the peers, some perhaps still waiting on this rank.
    try {
      record_failure(std::current_exception());
    } catch (...) {  // nothing more to be done while the communicator goes
    }
  }
}

coll::HostGroup CommImpl::host_group() {
  return {*fabric_,      *network_,   hosts_,          rank(),
          host_scratch_, uncompared_, *rooted_credit_, network_choices_};
}

int CommImpl::host_of(int rank) const {
  if (rank < 0 || rank >= hosts_.ranks()) {
    throw Error(ErrorCode::invalid_argument,
                "host_of(" + std::to_string(rank) + ") on communicator '" + setup_.name +
                    "': no such rank (size " + std::to_string(hosts_.ranks()) + ")");
  }
  return hosts_.host_of(rank);
}

int CommImpl::job_rank(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw Error(ErrorCode::invalid_argument,
                "job_rank(" + std::to_string(rank) + ") on communicator '" + setup_.name +
                    "': no such rank (size " + std::to_string(size()) + ")");
  }
  return names_.job_rank(rank);
}

bool CommImpl::same_host(int peer) const { return hosts_.host_of(peer) == hosts_.host_of(rank()); }

coll::OpDesc CommImpl::on_this_host(const coll::OpDesc& desc) const {
  coll::OpDesc local = desc;
  local.peer = hosts_.local_rank(desc.peer);  // the host's fabric numbers its ranks locally
  return local;
}

uint64_t CommImpl::next_sequence() const { return sequence_.load(std::memory_order_acquire); }

uint64_t CommImpl::take_sequence() noexcept {
  // Only the party that currently has the fabric (the owner inline, a claimed blocking call or
  // the thread running the queue's front) calls this: a plain load and store, no locked
  // instruction.
  const uint64_t sequence = sequence_.load(std::memory_order_relaxed);
  sequence_.store(sequence + 1, std::memory_order_release);
  return sequence;
}

std::string CommImpl::label(const coll::OpDesc& desc, uint64_t sequence) const {
  return std::string(coll::op_kind_name(desc.kind)) + " (sequence " + std::to_string(sequence) +
         ") on communicator '" + setup_.name + "'";
}

void CommImpl::validate(const coll::OpDesc& d) const {
  using coll::OpKind;
  // Runs on every call: the message is built only when an argument is wrong.
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::invalid_argument, std::string(coll::op_kind_name(d.kind)) +
                                                 " on communicator '" + setup_.name + "' (rank " +
                                                 std::to_string(rank()) + "): " + why);
  };
  if (!is_valid(d.dtype)) fail("unknown dtype " + std::to_string(static_cast<int>(d.dtype)));
  if (coll::is_reducing(d.kind) && !is_valid(d.op)) {
    fail("unknown reduction op " + std::to_string(static_cast<int>(d.op)));
  }
  const int n = size();
  if (coll::is_rooted(d.kind) && (d.root < 0 || d.root >= n)) {
    fail("root " + std::to_string(d.root) + " is outside [0, " + std::to_string(n) + ")");
  }
  if (d.kind == OpKind::send || d.kind == OpKind::recv) {
    if (d.peer < 0 || d.peer >= n) {
      fail("peer " + std::to_string(d.peer) + " is outside [0, " + std::to_string(n) + ")");
    }
    if (d.peer == rank()) fail("a rank cannot send to or receive from itself");
  }
  const size_t esize = dtype_size(d.dtype);
  if (d.count > kMaxBufferBytes / esize / static_cast<size_t>(n)) {
    fail("count " + std::to_string(d.count) +
         " is too large (a negative count converted to size_t?)");
  }
  if (d.count == 0 || d.kind == OpKind::barrier) return;
  const bool root = rank() == d.root;
  bool needs_send = false, needs_recv = false;
  switch (d.kind) {
    case OpKind::all_reduce:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_to_all: needs_send = needs_recv = true; break;
    case OpKind::reduce:
    case OpKind::gather:  // every rank contributes, only the root receives
      needs_send = true;
      needs_recv = root;
      break;
    case OpKind::broadcast:
    case OpKind::scatter:  // only the root sends, every rank receives
      needs_send = root;
      needs_recv = true;
      break;
    case OpKind::send: needs_send = true; break;
    case OpKind::recv: needs_recv = true; break;
    case OpKind::barrier: break;
  }
  if (needs_send && d.send == nullptr)
    fail("the send buffer is null but count is " + std::to_string(d.count));
  if (needs_recv && d.recv == nullptr)
    fail("the recv buffer is null but count is " + std::to_string(d.count));
}

std::chrono::milliseconds CommImpl::timeout_of(const char* what, const CallOptions& call) const {
  // Clamped so that now + timeout cannot overflow (e.g. milliseconds::max() for "no deadline").
  constexpr std::chrono::milliseconds kLongestTimeout = std::chrono::hours(24 * 30);
  auto timeout = std::min(call.timeout.value_or(default_timeout_), kLongestTimeout);
  if (timeout.count() < 0) {
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": negative timeout " +
                                                 std::to_string(timeout.count()) + " ms");
  }
  return timeout;
}

Work CommImpl::submit_async(const coll::OpDesc& desc, const CallOptions& call) {
  validate(desc);
  if (coll::is_point_to_point(desc.kind)) {
    const Clock::time_point deadline =
        Clock::now() + timeout_of(coll::op_kind_name(desc.kind), call);
    if (!network_) return p2p_->submit(desc, deadline);
    if (!same_host(desc.peer)) return net_p2p_->submit(desc, deadline);
    return p2p_->submit(on_this_host(desc), deadline);
  }
  return enqueue(Task{desc, coll::op_kind_name(desc.kind)}, call);
}

Work CommImpl::submit_composite(const char* name, std::function<void(const RunCollective&)> body,
                                const CallOptions& call) {
  return enqueue(Task{coll::OpDesc{}, name, std::move(body)}, call);
}

Work CommImpl::enqueue(Task task, const CallOptions& call) {
  const Clock::time_point deadline = Clock::now() + timeout_of(task.name, call);
  return queue_->enqueue(std::move(task), deadline);
}

std::exception_ptr CommImpl::run_task(const Task& task) {
  if (task.composite) return run_composite(task);
  return run(task.desc, take_sequence(), task.state->deadline, {});
}

std::exception_ptr CommImpl::run_composite(const Task& task) {
  try {
    task.composite([&](const coll::OpDesc& desc) {
      validate(desc);
      if (auto failure = run(desc, take_sequence(), task.state->deadline, {}))
        std::rethrow_exception(failure);
    });
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

void CommImpl::run_blocking(const coll::OpDesc& desc, const CallOptions& call) {
  validate(desc);
  const std::chrono::milliseconds timeout = timeout_of(coll::op_kind_name(desc.kind), call);
  if (coll::is_point_to_point(desc.kind)) {
    const Clock::time_point deadline = Clock::now() + timeout;
    if (!network_) return p2p_->run(desc, deadline);
    if (!same_host(desc.peer)) return net_p2p_->run(desc, deadline);
    return p2p_->run(on_this_host(desc), deadline);
  }
  OwnerGate& gate = queue_->gate();
  if (gate.owner_enter()) {  // the common case: one thread per communicator, nothing queued
    std::exception_ptr failure = run(desc, take_sequence(), std::nullopt, timeout);
    gate.owner_exit();
    if (failure) std::rethrow_exception(failure);
    return;
  }
  gate.add_claim();
  gate.wait_owner_out();
  if (!queue_->begin_inline()) {  // behind queued work: queued, and run by this thread's wait
    gate.release_claim();
    submit_async(desc, call).wait();
    return;
  }
  std::exception_ptr failure = run(desc, take_sequence(), std::nullopt, timeout);
  gate.release_claim();
  queue_->end_inline();
  if (failure) std::rethrow_exception(failure);
}

std::exception_ptr CommImpl::run(const coll::OpDesc& desc, uint64_t sequence,
                                 std::optional<Clock::time_point> deadline,
                                 std::chrono::milliseconds timeout) {
  // Flight recorder: one record per collective, begun here, ended below on either path.
  const FlightRecorder::Slot flight = recorder_.begin(
      desc.kind, desc.dtype, desc.count, coll::is_rooted(desc.kind) ? desc.root : -1, sequence);
  try {
    if (aborted_.load()) {
      throw Error(ErrorCode::aborted, label(desc, sequence) + ": the communicator was aborted");
    }
    if (failed_.load()) {
      std::lock_guard lock(mu_);
      throw transport::RootCauseError(
          label(desc, sequence) + ": the communicator is unusable after an earlier error",
          failure_);
    }
    // One captured reference keeps the std::function within its inline storage: no allocation
    // per operation (capturing this, desc and sequence separately would not fit).
    const struct {
      const CommImpl* comm;
      const coll::OpDesc* desc;
      uint64_t sequence;
    } op{this, &desc, sequence};
    auto describe = [&op] { return op.comm->label(*op.desc, op.sequence); };
    const transport::WaitContext ctx =
        deadline ? transport::WaitContext::with_deadline(*deadline, describe)
                 : transport::WaitContext::with_timeout(timeout, describe);
    if (network_) {
      recent_calls_.begin(coll::collective_fingerprint(desc, sequence));
      struct EndCall {
        RecentCalls& calls;
        ~EndCall() { calls.end(); }
      } end_call{recent_calls_};
      coll::run_across_hosts(host_group(), desc, sequence, ctx, setup_.settings.tuning);
    } else {
      coll::run_operation(*fabric_, desc, sequence, ctx, setup_.settings.tuning);
    }
    recorder_.end(flight, FlightState::completed);  // flight recorder
    return nullptr;
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    recorder_.end(flight, error);  // flight recorder
    record_failure(error);
    return error;
  }
}

std::exception_ptr CommImpl::record_failure(std::exception_ptr error) {
  std::exception_ptr first = keep_failure(error);
  // Last (the peers hear of a loss this rank found before the job's store does), and on an
  // aborted communicator too: the job goes on without the lost rank either way.
  report_loss_to_store(error);
  return first;
}

std::exception_ptr CommImpl::keep_failure(std::exception_ptr error) {
  // A consequence passes its root on, not its own wrapping.
  const transport::FailureRecord root = transport::root_of(error);
  std::exception_ptr first;
  {
    std::lock_guard lock(mu_);
    if (aborted_.load()) return error;
    if (!failed_.load()) {
      failure_ = root;
      first_error_ = error;
      failed_.store(true);
      fabric_->mark_failed(root);  // peers waiting on this rank fail fast
    }
    first = first_error_;
  }
  ProcessFailures::instance().record(root);
  if (network_) tell_other_hosts(root);  // ranks on other hosts fail now, naming it
  p2p_->fail_all(first);
  if (net_p2p_) net_p2p_->fail_all(first);
  recorder_.dump_on_failure(root.code);  // flight recorder: once, on the first failure
  return first;
}

void CommImpl::tell_other_hosts(const transport::FailureRecord& record) {
  network_->notify_failure(record);
  network_->await_failure_published(kFailurePublishWait);
}

std::optional<int> CommImpl::rank_of_process(uint64_t process) const {
  const auto found = std::find(processes_.begin(), processes_.end(), process);
  if (found == processes_.end()) return std::nullopt;
  return static_cast<int>(found - processes_.begin());
}

void CommImpl::fail_if_holding_lost_process(const transport::FailureRecord& root) {
  const std::optional<int> r = rank_of_process(root.lost_process);
  if (!r || *r == rank()) return;
  record_failure(std::make_exception_ptr(transport::RootCauseError(
      "communicator '" + setup_.name + "': its " + names_(*r) + " was found lost", root)));
}

void CommImpl::report_loss_to_store(std::exception_ptr error) noexcept {
  int job_rank = -1;
  std::string reason;
  try {
    std::rethrow_exception(error);
  } catch (const transport::ProcessLostError& lost) {
    const std::optional<int> r =
        lost.rank() >= 0 ? std::optional<int>(lost.rank()) : rank_of_process(lost.process());
    if (!r) return;
    job_rank = names_.job_rank(*r);
    reason = lost.what();
  } catch (...) {
    return;  // not a loss
  }
  try {
    setup_.store->report_lost(job_rank, reason, kFailurePublishWait);
  } catch (const std::exception& e) {
    // The store may be on the lost host. The peers were told over the network all the same.
    std::fprintf(stderr,
                 "tpf: communicator '%s', %s: could not tell the job's store that job rank %d "
                 "was lost: %s\n",
                 setup_.name.c_str(), names_(rank()).c_str(), job_rank, e.what());
  }
}

void CommImpl::abort() {
  aborted_.store(true);
  fabric_->abort();
  const transport::FailureRecord record{
      ErrorCode::aborted, "communicator '" + setup_.name + "' was aborted by its rank " +
                              std::to_string(rank()) + " (pid " + std::to_string(::getpid()) + ")"};
  // If this process exits now, its peers on other communicators learn why.
  ProcessFailures::instance().record(record);
  if (network_) tell_other_hosts(record);  // and those on other hosts, now
  const auto aborted = std::make_exception_ptr(
      Error(ErrorCode::aborted, "communicator '" + setup_.name + "' was aborted on this rank"));
  p2p_->fail_all(aborted);
  if (net_p2p_) net_p2p_->fail_all(aborted);
  recorder_.dump_on_failure(ErrorCode::aborted);  // flight recorder
}

std::unique_ptr<CommImpl> CommImpl::split(int color, int key, const CommOptions& options) {
  // Everyone learns everyone's (color, key) over the fabric itself.
  const int n = size();
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  coll::OpDesc desc;
  desc.kind = coll::OpKind::all_gather;
  desc.dtype = DType::i32;
  desc.count = 2;
  desc.send = mine;
  desc.recv = all.data();
  run_blocking(desc, {});
  uint64_t split_index;
  {
    std::lock_guard lock(mu_);
    split_index = splits_++;
  }
  if (color < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  CommSetup child = setup_;
  child.rank =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  child.size = static_cast<int>(members.size());
  child.name = setup_.name + ".s" + std::to_string(split_index) + "c" + std::to_string(color);
  child.job_ranks = job_ranks_of(members);
  child.options = child_options(options);
  child.settings = resolve_comm_settings(child.options);
  return std::make_unique<CommImpl>(std::move(child));
}

std::vector<int> CommImpl::job_ranks_of(const std::vector<int>& ranks) const {
  std::vector<int> job_ranks;
  for (int r : ranks) job_ranks.push_back(names_.job_rank(r));
  return job_ranks;
}

CommOptions CommImpl::child_options(const CommOptions& options) const {
  CommOptions child = options;
  if (!child.timeout) child.timeout = setup_.options.timeout;
  if (!child.buffer_bytes) child.buffer_bytes = setup_.options.buffer_bytes;
  return child;
}

std::vector<int> CommImpl::dead_members() const {
  const std::vector<int> dead_job_ranks = setup_.store->dead_ranks();  // ascending
  std::vector<int> dead;
  for (int r = 0; r < size(); ++r) {
    if (std::binary_search(dead_job_ranks.begin(), dead_job_ranks.end(), names_.job_rank(r)))
      dead.push_back(r);
  }
  return dead;
}

std::vector<int> CommImpl::dead_members_after_failure(Clock::time_point deadline) const {
  std::vector<int> dead = dead_members();
  if (!dead.empty() || !(failed_.load() || aborted_.load())) return dead;
  // Failed on a death the store has not seen yet, or on a failure or abort that followed one (a
  // peer that aborted its communicators at a death, as ULFM's revoke). The store answers a wait
  // on a key nobody sets once one of the awaited ranks is dead or lost.
  std::vector<int> all(static_cast<size_t>(size()));
  std::iota(all.begin(), all.end(), 0);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  try {
    setup_.store->get_many_from(job_ranks_of(all), {setup_.name + "/shrink: a key nobody sets"},
                                std::max(left, std::chrono::milliseconds(0)));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::peer_died && e.code() != ErrorCode::timeout) throw;
  }
  return dead_members();
}

std::optional<transport::FailureRecord> CommImpl::failure_no_death_explains() const {
  if (!failed_.load() || aborted_.load()) return std::nullopt;
  std::lock_guard lock(mu_);
  switch (failure_.code) {
    case ErrorCode::peer_died:  // a death
    case ErrorCode::timeout:    // a loss, or a wait for a dead rank that nothing reported sooner
    case ErrorCode::aborted:    // a peer's abort, as at a death (ULFM's revoke)
      return std::nullopt;
    default: return failure_;  // a mismatch, say: every rank lives
  }
}

std::unique_ptr<CommImpl> CommImpl::shrink(const CommOptions& options) {
  const std::string label = "communicator '" + setup_.name + "'";
  if (!setup_.store_knows_job_ranks) {
    throw Error(ErrorCode::invalid_argument,
                label +
                    ": shrink needs the job's store to know its ranks (a communicator made by "
                    "from_env or create() from a store address, or split from one), to tell "
                    "which of them died; this one's store is the caller's own");
  }
  if (const std::optional<transport::FailureRecord> other = failure_no_death_explains()) {
    throw Error(ErrorCode::invalid_argument,
                label + ": it failed on " + error_code_name(other->code) +
                    ", which no death or loss explains (" + other->message +
                    "): shrink leaves out only ranks that died or were found lost");
  }
  CommSetup child = setup_;
  child.options = child_options(options);
  child.settings = resolve_comm_settings(child.options);
  child.lineage = setup_.lineage.empty() ? setup_.name : setup_.lineage;
  const Clock::time_point deadline = Clock::now() + child.settings.setup_timeout;
  std::vector<int> dead = dead_members_after_failure(deadline);
  for (;;) {
    if (dead.empty()) {
      throw Error(ErrorCode::invalid_argument,
                  label +
                      ": shrink found no rank of it dead or lost (the job's store knows of "
                      "none): there is nothing to leave out");
    }
    if (std::binary_search(dead.begin(), dead.end(), rank())) {
      throw Error(ErrorCode::peer_died,
                  label + ": the job's store holds this rank, " + names_(rank()) +
                      ", dead or lost (found lost while stopped?): it cannot join the ranks that "
                      "go on");
    }
    std::vector<int> live;
    for (int r = 0; r < size(); ++r)
      if (!std::binary_search(dead.begin(), dead.end(), r)) live.push_back(r);
    child.rank = static_cast<int>(std::find(live.begin(), live.end(), rank()) - live.begin());
    child.size = static_cast<int>(live.size());
    child.job_ranks = job_ranks_of(live);
    // Named by its members' job ranks: ranks that shrink different communicators of the line
    // (this one, or one shrunk from it that included a rank dead since) to the same ranks meet.
    child.name = child.lineage + ".live(" + encode_rank_runs(child.job_ranks) + ")";
    // This process goes on: the new communicator's peers are not to take its old failure (or a
    // failed attempt's) for the cause of a later one.
    ProcessFailures::instance().go_on();
    try {
      return std::make_unique<CommImpl>(child);
    } catch (const Error& e) {
      // A member died while it was made: go again without it, if the store knows it now.
      if (e.code() != ErrorCode::peer_died || Clock::now() >= deadline) throw;
      std::vector<int> now = dead_members();
      if (now == dead) throw;
      dead = std::move(now);
    }
  }
}

}  // namespace tpf::detail
