// The flight recorder of a communicator (issue 15): its last N operations (sequence, op, dtype,
// count, root or peer, state, start and end times) in a fixed ring in memory, written out as text
// when the communicator fails (timeout, mismatch, abort, dead peer) or when the process gets the
// dump signal, so that a hung or failed job can say where every rank is. `tpf run` collects the
// dumps of all ranks and prints one summary (comm/flight_summary.h).
//
// Recording never allocates and reads the clock twice per operation (the TSC where the kernel's
// clock is the TSC: 12 ns against 33 ns for steady_clock here; converted to steady_clock
// nanoseconds only when a dump is written). Records are fixed-size slots in two rings:
// collectives, which a communicator runs one at a time, are recorded with plain stores (no locked
// instruction: one would drain the store buffer and make a broadcast root wait for its message to
// reach the readers); sends and receives, which any thread may begin and end concurrently, claim
// their slot with one locked instruction each way. Each slot carries a stamp, so a dump may read
// the rings while operations are being recorded.
//
// Settings: TPF_FLIGHT_RECORDER_SIZE (records per communicator, default 64, 0 turns recording and
// dumps off), TPF_FLIGHT_RECORDER_DIR (a directory: each process appends its dumps to
// flight-<job>-rank<R>-pid<P>.txt there; unset: dumps go to stderr), TPF_FLIGHT_RECORDER_STORE
// (1: they go to the job's store instead, where `tpf run --hosts` reads them; comm/flight_store.h)
// and TPF_FLIGHT_RECORDER_SIGNAL (the dump signal: USR1, USR2 (default) or off).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coll/op_desc.h"
#include "tpf/dtype.h"
#include "tpf/error.h"

namespace tpf::detail {

enum class FlightState : uint8_t { in_flight, completed, failed };

// One recorded operation, as a plain value (a snapshot of a ring slot, or parsed from a dump).
struct FlightRecord {
  uint64_t id = 0;        // the n-th operation recorded on this communicator
  uint64_t sequence = 0;  // collectives: the sequence number; send/recv: the per-peer index
  coll::OpKind kind = coll::OpKind::barrier;
  DType dtype = DType::u8;
  uint64_t count = 0;
  int peer = -1;  // the root of a rooted collective, the peer of a send/recv, else -1
  FlightState state = FlightState::in_flight;
  ErrorCode error = ErrorCode::internal;  // meaningful when state == failed
  int64_t start_ns = 0;                   // steady_clock
  int64_t end_ns = 0;                     // 0 while in flight

  bool operator==(const FlightRecord&) const = default;
};

// Ranks as a dump's header lists them: runs of a common step, "0-3,8-20/4,7" (a-b/s: a, a+s, ...,
// b), so that a tensor-, data- or pipeline-parallel group's job ranks take one run.
std::string encode_rank_runs(const std::vector<int>& ranks);
// The list back; nullopt if malformed or longer than `max_ranks`.
std::optional<std::vector<int>> decode_rank_runs(std::string_view text, size_t max_ranks);

const char* flight_state_name(FlightState state) noexcept;  // "in_flight", "completed", "failed"
const char* error_code_token(ErrorCode code) noexcept;      // "peer_died", ... (one word)

class FlightRecorder {
 public:
  // A ticket naming the record of one operation; kNoSlot when recording is off.
  using Slot = uint64_t;
  static constexpr Slot kNoSlot = ~uint64_t{0};
  static constexpr size_t kDefaultCapacity = 64;
  static constexpr size_t kMaxCapacity = size_t{1} << 20;

  // `capacity` records per ring (TPF_FLIGHT_RECORDER_SIZE, read by comm/settings.cc); 0 = off.
  // Throws Error(invalid_argument) for a malformed TPF_FLIGHT_RECORDER_SIGNAL.
  explicit FlightRecorder(size_t capacity);
  ~FlightRecorder();  // leaves the process's registry
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Names the communicator in dumps and joins the process's registry, which dumps every live
  // recorder on the dump signal (and arms that signal on first use). `job_ranks[r]`: the job's
  // number of rank r (a split's; empty: the same numbers), written in each dump's header so that
  // a summary names a split's ranks as its errors do. Does not throw.
  void attach(std::string comm_name, uint64_t generation, int rank, int size,
              const std::vector<int>& job_ranks = {});

  // Any thread; no allocation. Collectives (every kind but send and recv) must not be begun or
  // ended concurrently with another collective of this recorder (a communicator runs one at a
  // time); sends and receives may. end() of a record that newer operations have pushed out of the
  // ring does nothing.
  Slot begin(coll::OpKind kind, DType dtype, uint64_t count, int peer_or_root,
             uint64_t sequence) noexcept;
  void end(Slot slot, FlightState state, ErrorCode error = ErrorCode::internal) noexcept;
  // Marks the record failed with the error's code (Error, or internal for anything else); a null
  // error marks it completed.
  void end(Slot slot, const std::exception_ptr& error) noexcept;

  // Writes a dump for the communicator's first failure with a code worth one (timeout, mismatch,
  // peer_died, aborted); later calls write nothing, but return only once that dump is written
  // (the heartbeat thread may be writing it as a failed call returns and the program exits).
  void dump_on_failure(ErrorCode code) noexcept;

  size_t capacity() const noexcept { return capacity_; }
  // The records still in the rings: collectives oldest first, then sends and receives oldest
  // first (ids count per ring). A record being written is skipped.
  std::vector<FlightRecord> snapshot() const;
  // The dump text: a header line naming communicator, rank, pid and reason, one line per record,
  // an end line (format in docs/fabric.md).
  std::string format(std::string_view reason) const;

 private:
  struct alignas(64) Entry {
    // ((ticket + 1) << 2) | phase; phase 0: begun, 1: begin being written, 2: ended, 3: end
    // being written. 0: never used. Each ticket passes 0 -> 2 once, so a reader that sees the
    // same stable stamp before and after copying the fields has a consistent copy.
    std::atomic<uint64_t> stamp{0};
    std::atomic<uint64_t> sequence{0};
    std::atomic<uint64_t> count{0};
    std::atomic<int64_t> start_ticks{0};
    std::atomic<int64_t> end_ticks{0};
    std::atomic<int32_t> peer{0};
    std::atomic<uint32_t> packed{0};  // kind | dtype << 8 | state << 16 | error << 24
  };
  struct Ring {
    std::unique_ptr<Entry[]> entries;
    std::atomic<uint64_t> next{0};  // the next ticket
  };
  // A slot's top bit says which ring it is in.
  static constexpr Slot kMessageBit = Slot{1} << 63;

  Slot begin_collective(uint32_t packed, uint64_t count, int peer, uint64_t sequence) noexcept;
  Slot begin_message(uint32_t packed, uint64_t count, int peer, uint64_t sequence) noexcept;
  // Fills a claimed entry (its stamp says "begin being written") and publishes it as begun.
  void write_begin(Entry& e, uint64_t mine, uint32_t packed, uint64_t count, int peer,
                   uint64_t sequence) const noexcept;
  void read_ring(const Ring& ring, std::vector<FlightRecord>& out) const;
  int64_t now_ticks() const noexcept;

  size_t capacity_;
  bool use_tsc_;
  Ring collectives_;  // one writer at a time
  Ring messages_;     // any number of writers
  std::mutex failure_dump_mu_;  // held while the failure's dump is written
  bool failure_dumped_ = false;   // guarded by failure_dump_mu_
  bool attached_ = false;
  std::string comm_name_;  // set once by attach(), before anything can dump
  uint64_t generation_ = 0;
  int rank_ = 0;
  int size_ = 0;
  std::string job_ranks_;  // encode_rank_runs of the job's numbers; empty: the same numbers
};

// Writes `text` where dumps go (TPF_FLIGHT_RECORDER_DIR's file for this process, or stderr).
void write_flight_dump(const std::string& text) noexcept;

}  // namespace tpf::detail
