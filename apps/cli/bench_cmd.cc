// `tpf bench COLLECTIVE ...`: nccl-tests for the shared-memory fabric. Every rank runs the same
// sweep; rank 0 prints the table (and optionally JSON). See bench_options.cc for the flags.
//
// Time of one size = max over ranks of (wall time of `iters` back-to-back calls / iters), measured
// after `warmup` calls and a barrier, exactly as nccl-tests reports it. With -c 1 the buffers are
// refilled after timing, the call runs once more and every rank counts the elements that differ
// from the serially computed expectation; the counts are summed over ranks. With --compute-us the
// time spent in the caller's own work (a sleep) is left out of the wall time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/bench_check.h"
#include "cli/bench_options.h"
#include "cli/bench_spec.h"
#include "cli/bench_table.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "coll/cost_model.h"
#include "coll/network_cost.h"
#include "comm/settings.h"
#include "tpf/comm.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

// The 1-minute load average, recorded with the results (a busy machine explains slow rows); -1
// where /proc does not say.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

// Cache-line (and AVX-512) aligned heap buffer; aligned like a user's tensor would be.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes) : bytes_(bytes) {
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    data_ =
        static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded));
    if (data_ == nullptr) {
      throw Error(ErrorCode::resource, "cannot allocate " + std::to_string(bytes) +
                                           " bytes of benchmark buffer; lower -e");
    }
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  unsigned char* data() const noexcept { return data_; }
  size_t bytes() const noexcept { return bytes_; }

 private:
  static constexpr size_t kAlign = 64;
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
};

// Bytes that no expected value has (0x7f7f... is NaN in f16 and huge in f32/bf16, 127 in i8/u8),
// so an element the collective forgot to write is counted as wrong.
constexpr int kPoison = 0x7f;

struct Step {
  const BenchOptions& opt;
  Communicator& comm;
  CallShape shape;
  size_t elem = 0;  // bytes per element
  AlignedBuffer& send;
  AlignedBuffer& recv;  // max(send_elems, recv_elems) elements: also the in-place buffer
  std::chrono::steady_clock::duration computed{};  // spent in compute() since measure() reset it
};

// The caller's own work (--compute-us), timed so that measure() can leave it out.
void compute(Step& s) {
  if (s.opt.compute_us == 0) return;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::microseconds(s.opt.compute_us));
  s.computed += std::chrono::steady_clock::now() - start;
}

void run_sendrecv(Step& s, const void* sbuf, void* rbuf) {
  const int n = s.comm.size();
  const int rank = s.comm.rank();
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  // Even ranks send first, odd ranks receive first: a ring of blocking calls that cannot deadlock
  // even when a send completes only once its receiver has arrived.
  if (rank % 2 == 0) {
    s.comm.send(sbuf, s.shape.count, s.opt.dtype, next);
    s.comm.recv(rbuf, s.shape.count, s.opt.dtype, prev);
  } else {
    s.comm.recv(rbuf, s.shape.count, s.opt.dtype, prev);
    s.comm.send(sbuf, s.shape.count, s.opt.dtype, next);
  }
}

// Where a call reads and writes; in-place follows the NCCL conventions stated in comm.h.
struct Placement {
  const void* sendp;
  void* recvp;
  unsigned char* result;  // where this rank's output starts
  size_t result_elems;
};

Placement placement(Step& s, bool in_place) {
  const size_t rank = static_cast<size_t>(s.comm.rank());
  unsigned char* r = s.recv.data();
  if (!in_place) return {s.send.data(), r, r, s.shape.recv_elems};
  switch (s.opt.collective) {
    case Collective::all_gather:
      return {r + rank * s.shape.count * s.elem, r, r, s.shape.recv_elems};
    case Collective::reduce_scatter: {
      unsigned char* mine = r + rank * s.shape.count * s.elem;
      return {r, mine, mine, s.shape.count};
    }
    default:  // all_reduce, reduce, broadcast
      return {r, r, r, s.shape.count};
  }
}

// Work::wait; a loop of Work::wait_for with a limit far above any operation's time, so that each
// call returns with the operation done; or a loop of Work::test. The form's own cost is measured.
void wait_for_work(Work& work, AsyncWait form) {
  switch (form) {
    case AsyncWait::wait: return work.wait();
    case AsyncWait::timed:
      while (!work.wait_for(std::chrono::seconds(1))) {
      }
      return;
    case AsyncWait::poll:
      while (!work.test()) std::this_thread::yield();
      return;
  }
}

// Both transfers in flight before either is waited for, so neither order can deadlock.
void run_sendrecv_async(Step& s, const void* sbuf, void* rbuf) {
  const int n = s.comm.size();
  const int rank = s.comm.rank();
  Work received = s.comm.recv_async(rbuf, s.shape.count, s.opt.dtype, (rank + n - 1) % n);
  Work sent = s.comm.send_async(sbuf, s.shape.count, s.opt.dtype, (rank + 1) % n);
  compute(s);
  wait_for_work(sent, s.opt.async_wait);
  wait_for_work(received, s.opt.async_wait);
}

void run_async_call(Step& s, const Placement& p) {
  const BenchOptions& o = s.opt;
  const size_t c = s.shape.count;
  Work work;
  switch (o.collective) {
    case Collective::all_reduce:
      work = s.comm.all_reduce_async(p.sendp, p.recvp, c, o.dtype, o.op);
      break;
    case Collective::reduce:
      work = s.comm.reduce_async(p.sendp, p.recvp, c, o.dtype, o.op, o.root);
      break;
    case Collective::broadcast:
      work = s.comm.broadcast_async(p.sendp, p.recvp, c, o.dtype, o.root);
      break;
    case Collective::all_gather:
      work = s.comm.all_gather_async(p.sendp, p.recvp, c, o.dtype);
      break;
    case Collective::reduce_scatter:
      work = s.comm.reduce_scatter_async(p.sendp, p.recvp, c, o.dtype, o.op);
      break;
    case Collective::all_to_all:
      work = s.comm.all_to_all_async(p.sendp, p.recvp, c, o.dtype);
      break;
    case Collective::gather:
      work = s.comm.gather_async(p.sendp, p.recvp, c, o.dtype, o.root);
      break;
    case Collective::scatter:
      work = s.comm.scatter_async(p.sendp, p.recvp, c, o.dtype, o.root);
      break;
    case Collective::send_recv: run_sendrecv_async(s, p.sendp, p.recvp); return;
    case Collective::barrier: work = s.comm.barrier_async(); break;
  }
  compute(s);
  wait_for_work(work, o.async_wait);
}

void run_call(Step& s, const Placement& p) {
  const BenchOptions& o = s.opt;
  const size_t c = s.shape.count;
  if (o.async_calls) return run_async_call(s, p);
  compute(s);
  switch (o.collective) {
    case Collective::all_reduce: s.comm.all_reduce(p.sendp, p.recvp, c, o.dtype, o.op); break;
    case Collective::reduce: s.comm.reduce(p.sendp, p.recvp, c, o.dtype, o.op, o.root); break;
    case Collective::broadcast: s.comm.broadcast(p.sendp, p.recvp, c, o.dtype, o.root); break;
    case Collective::all_gather: s.comm.all_gather(p.sendp, p.recvp, c, o.dtype); break;
    case Collective::reduce_scatter:
      s.comm.reduce_scatter(p.sendp, p.recvp, c, o.dtype, o.op);
      break;
    case Collective::all_to_all: s.comm.all_to_all(p.sendp, p.recvp, c, o.dtype); break;
    case Collective::gather: s.comm.gather(p.sendp, p.recvp, c, o.dtype, o.root); break;
    case Collective::scatter: s.comm.scatter(p.sendp, p.recvp, c, o.dtype, o.root); break;
    case Collective::send_recv: run_sendrecv(s, p.sendp, p.recvp); break;
    case Collective::barrier: s.comm.barrier(); break;
  }
}

// Puts this rank's deterministic input where the call reads it and poisons the output.
void prepare(Step& s, bool in_place) {
  const int rank = s.comm.rank();
  const BenchOptions& o = s.opt;
  std::memset(s.recv.data(), kPoison, s.recv.bytes());
  if (!in_place) {
    fill_buffer(o.dtype, o.op, rank, s.send.data(), 0, s.shape.send_elems);
    return;
  }
  const Placement p = placement(s, true);
  // In place the input occupies the send region inside the receive buffer.
  fill_buffer(o.dtype, o.op, rank, const_cast<void*>(p.sendp), 0, s.shape.send_elems);
}

double max_over_ranks(Communicator& comm, double v) {
  double out = 0.0;
  comm.all_reduce(&v, &out, 1, DType::f64, ReduceOp::max);
  return out;
}

uint64_t sum_over_ranks(Communicator& comm, uint64_t v) {
  int64_t in = static_cast<int64_t>(v);
  int64_t out = 0;
  comm.all_reduce(&in, &out, 1, DType::i64, ReduceOp::sum);
  return static_cast<uint64_t>(out);
}

Measurement measure(Step& s, bool in_place) {
  prepare(s, in_place);
  const Placement p = placement(s, in_place);
  for (int i = 0; i < s.opt.warmup; ++i) run_call(s, p);
  s.comm.barrier();
  s.computed = {};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < s.opt.iters; ++i) run_call(s, p);
  const auto t1 = std::chrono::steady_clock::now();
  const double mine =
      std::chrono::duration<double, std::micro>(t1 - t0 - s.computed).count() / s.opt.iters;
  const double time_us = max_over_ranks(s.comm, mine);

  std::optional<uint64_t> wrong;
  if (s.opt.check && s.opt.collective != Collective::barrier) {
    // Repeated in-place reductions compound; refill so the check sees one call's result.
    prepare(s, in_place);
    run_call(s, p);
    const CheckContext ctx{s.opt.collective, s.opt.dtype, s.opt.op,     s.comm.rank(),
                           s.comm.size(),    s.opt.root,  s.shape.count};
    wrong = sum_over_ranks(s.comm, count_wrong(ctx, p.result, p.result_elems));
  }
  return make_measurement(s.opt.collective, s.comm.size(), s.shape.bytes, time_us, wrong);
}

int run_bench(const BenchOptions& opt) {
  const auto creating = std::chrono::steady_clock::now();
  Communicator comm = Communicator::from_env();
  const double created_ms = std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - creating)
                                .count();
  const int n = comm.size();
  const bool rank0 = comm.rank() == 0;
  // Every rank sees the same size and options, so every rank takes the same early exit.
  if (collective_has_root(opt.collective) && opt.root >= n) {
    if (!rank0) return kExitUsage;  // rank 0 alone says why, once
    throw UsageError("root " + std::to_string(opt.root) + " is out of range for " +
                     std::to_string(n) + " ranks; pass -r 0.." + std::to_string(n - 1));
  }
  if (opt.collective == Collective::send_recv && n < 2) {
    if (!rank0) return kExitUsage;
    throw UsageError("send_recv needs at least 2 ranks; start it with tpf run -n 2 (or more)");
  }

  BenchReport report;
  report.collective = opt.collective;
  report.nranks = n;
  report.dtype = dtype_name(opt.dtype);
  report.op = collective_reduces(opt.collective) ? reduce_op_name(opt.op) : "none";
  report.root = collective_has_root(opt.collective) ? opt.root : -1;
  report.iters = opt.iters;
  report.warmup = opt.warmup;
  report.async_calls = opt.async_calls;
  report.async_wait = opt.async_wait;
  report.compute_us = opt.compute_us;
  // The settings this communicator resolved (the same environment, the same resolver).
  const detail::CommSettings settings = detail::resolve_comm_settings();
  if (settings.tuning.forced_all_reduce) {
    report.algorithm = coll::all_reduce_algorithm_name(*settings.tuning.forced_all_reduce);
  }
  report.hosts = comm.host_count();
  report.network_min_slice_bytes = coll::all_reduce_min_slice_bytes(settings.tuning.network_cost);
  report.network_chain = coll::chain_cut(settings.tuning.network_cost);
  if (settings.tuning.forced_network) {
    report.network_algorithm = coll::network_algorithm_name(*settings.tuning.forced_network);
  }
  report.slot_bytes = settings.slot_bytes;
  report.cpus = settings.job_cpus;
  report.excess_ranks = settings.excess_ranks(comm.ranks_on_machine());  // as the fabric counts
  report.loadavg = load_average();
  comm.all_reduce(&created_ms, &report.setup_ms, 1, DType::f64, ReduceOp::max);
  if (rank0) print_table_header(stdout, report);

  const size_t elem = dtype_size(opt.dtype);
  std::vector<size_t> sizes = opt.collective == Collective::barrier
                                  ? std::vector<size_t>{0}
                                  : sweep_sizes(opt.min_bytes, opt.max_bytes, opt.factor);
  // The largest shape decides the buffers, allocated once for the whole sweep.
  size_t max_send = 1;
  size_t max_recv = 1;
  for (size_t bytes : sizes) {
    if (auto sh = call_shape(opt.collective, bytes, elem, n)) {
      max_send = std::max(max_send, sh->send_elems);
      max_recv = std::max({max_recv, sh->recv_elems, sh->send_elems});
    }
  }
  AlignedBuffer send(max_send * elem);
  AlignedBuffer recv(max_recv * elem);

  size_t last_bytes = SIZE_MAX;
  for (size_t bytes : sizes) {
    std::optional<CallShape> shape = call_shape(opt.collective, bytes, elem, n);
    if (!shape && opt.collective != Collective::barrier) continue;  // below one element per rank
    if (opt.collective == Collective::barrier) shape = CallShape{};
    if (shape->bytes == last_bytes) continue;  // rounding gave the same size as the last row
    last_bytes = shape->bytes;
    Step step{opt, comm, *shape, elem, send, recv};
    BenchRow row;
    row.bytes = shape->bytes;
    row.count = shape->elems;
    if (opt.out_of_place) row.oop = measure(step, false);
    if (opt.in_place) row.ip = measure(step, true);
    if (rank0) print_table_row(stdout, report, row);
    report.rows.push_back(row);
  }
  if (report.rows.empty() && rank0) {
    std::fprintf(stderr,
                 "tpf bench: no size in -b %zu .. -e %zu gives each of %d ranks one %s "
                 "element; raise -e\n",
                 opt.min_bytes, opt.max_bytes, n, report.dtype.c_str());
  }
  if (rank0) print_table_footer(stdout, report);
  comm.barrier();  // nobody leaves (and tears down shared memory) while a peer still reads

  if (rank0 && !opt.json_path.empty()) {
    std::ofstream f(opt.json_path, std::ios::trunc);
    f << report_to_json(report);
    f.close();
    if (!f) {
      std::fprintf(stderr, "tpf bench: cannot write JSON results to '%s'; check the path\n",
                   opt.json_path.c_str());
      return kExitFailure;
    }
  }
  return total_wrong(report) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

// Errors propagate to main(), which prints them and picks the exit status (UsageError: 2).
void add_bench_command(Command& tpf) {
  Command bench = tpf.add_subcommand("bench", "measure collective bandwidth and latency");
  auto flags = std::make_shared<BenchFlags>();
  add_bench_flags(bench, *flags);
  set_action(bench, [flags] { return run_bench(bench_options(*flags)); });
}

}  // namespace tpf::cli
