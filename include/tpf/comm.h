// The communicator: a group of ranks (processes, on one machine or several) that run collectives
// over the in-memory fabric inside a host and the network between hosts (docs/fabric.md). Every
// rank of a communicator must issue the same collectives in the same order; a mismatch is detected
// and reported (Error(mismatch)) instead of corrupting data.
//
// Threading and ordering:
// - A Communicator may be used from several threads; calls are serialized in the order they enter
//   the communicator. Issuing collectives concurrently from two threads on one communicator is safe
//   but leaves their order unspecified, so do it only if every rank does it identically.
// - *_async calls return at once; the collectives of one communicator run one after another, in
//   issue order, each on the first thread to reach it: a thread in Work::wait, which runs the
//   queued collectives up to its own itself, or the communicator's progress thread, which starts
//   what nobody waits for within about 16 ms (so it overlaps the caller's longer work), and at
//   once while the caller waits for each a while after issuing it (50 us or more). A blocking
//   collective waits for all earlier async collectives first (and runs them, where nothing else
//   has yet).
// - Point-to-point calls (send/recv) are matched per pair and direction in issue order, and
//   progress independently of each other and of the collectives: a rank may post a large send
//   and its receive and wait for both (no deadlock), or run collectives while a send is pending.
//   They take no sequence number, so ranks outside a send/recv stay in step for collectives.
// - Different communicators (e.g. from split()) are independent and may run concurrently.
// - Buffers passed to an async call must stay valid and unmodified until its Work completes.
//
// Buffers and counts: counts are in elements. In-place forms (NCCL conventions):
//   all_reduce/reduce/broadcast: send == recv;  all_gather: send == recv + rank*count;
//   reduce_scatter: recv == send + rank*recv_count.
// Results are deterministic: every rank receives bit-identical output (fixed reduction order
// rank 0, 1, ..., n-1; f16/bf16 accumulate in f32 and round once, to nearest even). Across hosts
// the order is each host's ranks in rank order, then the hosts in the order of their lowest ranks
// (f16/bf16 then round once per host and once across hosts).
#pragma once

#include "tpf/export.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpf/dtype.h"
#include "tpf/store.h"

// Internal types: declared outside the exported namespace block, so they stay hidden.
namespace tpf::detail {
class CommImpl;
struct WorkState;
}  // namespace tpf::detail

namespace TPF_API tpf {

using Clock = std::chrono::steady_clock;

struct CommOptions {
  // Default deadline of each operation; TPF_TIMEOUT (seconds) overrides the built-in 300 s.
  std::optional<std::chrono::milliseconds> timeout;
  // Bytes of staging buffer per rank in shared memory; TPF_SHM_BUFFER_BYTES overrides.
  std::optional<size_t> buffer_bytes;
};

struct CallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // overrides the communicator's default
};

// Handle to an operation started by an *_async call. Copyable; all copies see the same operation.
// A default-constructed Work is already complete.
class Work {
 public:
  Work() = default;
  // Blocks until done; rethrows the operation's error. Every wait inside the operation is bounded
  // by its deadline, so this returns (or throws) once the operation has stopped using its buffers.
  // A send or recv is moved by the waiting thread itself (no hand-off to another thread), and so
  // is a collective that has not started yet, with the collectives queued before it.
  void wait();
  // True if done (rethrows the error if it failed); never blocks. A send or recv is moved one
  // round first where no other thread is moving it, so a caller that polls makes progress; a
  // collective not yet started is handed to the communicator's thread to start at once (it runs
  // there: it may block until its peers join).
  bool test();
  // True once the operation has ended, successfully or not (wait() or test() then say which);
  // never moves it and never throws: for bookkeeping of finished handles, and to watch the
  // communicator's own threads at work.
  bool completed() const;
  // Waits until done or the deadline; true if done (rethrows the error if it failed). A send or
  // recv is moved by the waiting thread itself until then, as in wait(). A collective cannot be
  // stopped midway at this deadline, so the waiting thread runs it (and those queued before it)
  // only where the operation's own deadline comes first; otherwise the communicator's thread is
  // told to start it at once. Returns within about a millisecond of the deadline.
  bool wait_until(Clock::time_point deadline);
  bool wait_for(std::chrono::nanoseconds duration) { return wait_until(Clock::now() + duration); }

  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class Communicator {
 public:
  // From a launcher's environment (tpf run, torchrun, mpirun, srun); see launch_env.h.
  static Communicator from_env(const CommOptions& options = {});
  // From an explicit (rank, size, store address "host:port") triple.
  static Communicator create(int rank, int size, const std::string& store_address,
                             const std::string& secret = "", const CommOptions& options = {});
  // Over an existing store; `name` keeps several communicators on one store apart. A name may be
  // used again: after its communicator is destroyed, or after a creation under it failed (every
  // rank then tries again).
  static Communicator create(int rank, int size, std::shared_ptr<Store> store,
                             const std::string& name = "world", const CommOptions& options = {});

  Communicator();  // an invalid (empty) communicator, e.g. from split() with a negative color
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  bool valid() const noexcept { return impl_ != nullptr; }
  int rank() const;
  int size() const;
  const std::string& name() const;
  // The hosts this communicator's ranks are on (1 when they all share memory; docs/fabric.md).
  int host_count() const;
  // The host `rank` is on: 0 .. host_count()-1, hosts numbered in the order of their lowest ranks.
  int host_of(int rank) const;
  // `rank`'s rank in the job: in the communicator this one was split from, and so on up to the
  // one made from the launcher's environment or by create() (torch's get_global_rank). Error
  // messages name a split's ranks both ways: "rank 1 (job rank 9)".
  int job_rank(int rank) const;
  // This communicator's ranks on this rank's machine (one running kernel), itself included,
  // whichever host each is on: the ranks that share its cores. Emulated hosts (network
  // namespaces) of one machine count together.
  int ranks_on_machine() const;

  // Collective over this communicator: ranks with the same color form a new communicator, ordered
  // by key then by rank. A negative color returns an invalid Communicator.
  Communicator split(int color, int key, const CommOptions& options = {}) const;
  // After ranks of this communicator died or were found lost (a call failed naming one): the
  // communicator of the ranks that go on, in their order here, made without this one's
  // collectives (as ULFM's MPI_Comm_shrink). Called by every surviving rank. Which ranks are gone
  // is what the job's store knows (a rank whose process died, or that a heartbeat found lost), so
  // every survivor leaves out the same ones; one that dies while it is made is left out in turn.
  // Abort the other communicators you hold with the survivors first, so that one blocked with you
  // in them fails at once and shrinks too. Error(invalid_argument) where the store knows of no
  // dead rank here (at once for a healthy communicator or one that failed on what no death
  // explains, a mismatch; one that failed on a death, a loss, a timeout or an abort first waits up
  // to the setup timeout for the store to learn of a death), or cannot tell (made by create() over
  // the caller's own store); Error(peer_died) where the store holds this very rank lost. A shrink
  // that failed (a survivor was late: Error(timeout)) may be called again by every survivor. This
  // communicator stays failed: destroy it. docs/fabric.md, "Going on without a rank".
  Communicator shrink(const CommOptions& options = {}) const;

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  const CallOptions& call = {});
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root,
              const CallOptions& call = {});
  // send is read on root only; recv is written on every rank (root included, if send != recv).
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                 const CallOptions& call = {});
  // recv holds size() * send_count elements, rank r's contribution at offset r * send_count.
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                  const CallOptions& call = {});
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                      const CallOptions& call = {});
  // send and recv hold size() * count elements; block j of rank i's send lands in block i of rank j.
  void all_to_all(const void* send, void* recv, size_t count, DType dtype,
                  const CallOptions& call = {});
  // All-to-all with a count per pair (MPI_Alltoallv; torch's all_to_all_single with splits): block
  // j of this rank's send, send_counts[j] elements at send + send_displs[j], lands on rank j at
  // recv + recv_displs[i] (i this rank), where rank j's recv_counts[i] must equal it. Each array
  // holds size() entries; displacements are in elements; the receive blocks must not overlap one
  // another (they may overlap the send blocks). Counts that disagree, or any rank's invalid
  // arguments, fail every rank with the same Error naming the pair or the rank. It runs as one
  // all_to_all of the largest block (docs/fabric.md): its time follows the largest pair, and it
  // holds 2 x size() x that block in scratch while it runs.
  void all_to_allv(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_displs, void* recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                   DType dtype, const CallOptions& call = {});
  // recv (root only) holds size() * send_count elements.
  void gather(const void* send, void* recv, size_t send_count, DType dtype, int root,
              const CallOptions& call = {});
  // send (root only) holds size() * recv_count elements.
  void scatter(const void* send, void* recv, size_t recv_count, DType dtype, int root,
               const CallOptions& call = {});
  // Point to point: sends and receives between a pair are matched in order. A send may return
  // once its message is staged, before the peer receives it.
  void send(const void* buf, size_t count, DType dtype, int peer, const CallOptions& call = {});
  void recv(void* buf, size_t count, DType dtype, int peer, const CallOptions& call = {});
  void barrier(const CallOptions& call = {});

  Work all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                        const CallOptions& call = {});
  Work reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root,
                    const CallOptions& call = {});
  Work broadcast_async(const void* send, void* recv, size_t count, DType dtype, int root,
                       const CallOptions& call = {});
  Work all_gather_async(const void* send, void* recv, size_t send_count, DType dtype,
                        const CallOptions& call = {});
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                            ReduceOp op, const CallOptions& call = {});
  Work all_to_all_async(const void* send, void* recv, size_t count, DType dtype,
                        const CallOptions& call = {});
  // The count arrays are copied: only the buffers must outlive the Work. Errors in the arguments
  // (any rank's) and counts that disagree come from the Work, on every rank alike.
  Work all_to_allv_async(const void* send, std::span<const size_t> send_counts,
                         std::span<const size_t> send_displs, void* recv,
                         std::span<const size_t> recv_counts,
                         std::span<const size_t> recv_displs, DType dtype,
                         const CallOptions& call = {});
  Work gather_async(const void* send, void* recv, size_t send_count, DType dtype, int root,
                    const CallOptions& call = {});
  Work scatter_async(const void* send, void* recv, size_t recv_count, DType dtype, int root,
                     const CallOptions& call = {});
  Work send_async(const void* buf, size_t count, DType dtype, int peer,
                  const CallOptions& call = {});
  Work recv_async(void* buf, size_t count, DType dtype, int peer, const CallOptions& call = {});
  Work barrier_async(const CallOptions& call = {});

  // Fails pending and later operations of this communicator at once (Error(aborted)), and tells
  // the peers, whose operations then fail too. Safe to call from any thread.
  void abort();

  // How many collectives this communicator has started (the sequence number of the next one to
  // start; collectives start in issue order). Point-to-point calls do not count.
  uint64_t next_sequence() const;

 private:
  TPF_LOCAL explicit Communicator(std::unique_ptr<detail::CommImpl> impl);
  std::unique_ptr<detail::CommImpl> impl_;
};

}  // namespace tpf
