#include "cli/bench_options.h"

#include <limits>
#include <optional>
#include <string_view>

#include "cli/command_line.h"
#include "cli/option_values.h"

namespace tpf::cli {
namespace {

// Far above any shared-memory machine today; catches a typo such as -e 64G before the
// allocation does, with a message instead of an out-of-memory kill.
constexpr size_t kMaxBenchBytes = size_t{16} << 30;

std::string single_quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

int parse_int(const std::optional<std::string>& value, const char* flag, int fallback,
              int min_value) {
  return static_cast<int>(
      integer_option(value, flag, fallback, min_value, std::numeric_limits<int>::max()));
}

size_t parse_size(std::string_view flag, std::string_view value) {
  const std::optional<size_t> v = parse_byte_size(value);
  if (!v || *v > kMaxBenchBytes) {
    throw UsageError(std::string(flag) +
                     " expects a byte count such as 8, 64K, 32M or 1G (at most 16G), got " +
                     single_quoted(value));
  }
  return *v;
}

Collective parse_collective_arg(const std::optional<std::string>& text) {
  if (!text) {
    throw UsageError(std::string("which collective? choose one of ") + collective_choices());
  }
  const auto c = parse_collective(*text);
  if (!c) {
    throw UsageError("unknown collective " + single_quoted(*text) + "; choose one of " +
                     collective_choices());
  }
  return *c;
}

size_t parse_min_bytes(const std::string& value) {
  const size_t bytes = parse_size("-b", value);
  // The sweep multiplies the size by -f: from 0 it would never reach -e.
  if (bytes == 0) {
    throw UsageError(
        "-b expects a byte count of at least 1 (the sweep multiplies it by -f "
        "until it passes -e), got " +
        single_quoted(value));
  }
  return bytes;
}

DType parse_dtype_arg(const std::string& value) {
  const auto d = parse_dtype(value);
  if (!d) {
    throw UsageError("unknown dtype " + single_quoted(value) +
                     "; choose one of f32 f64 f16 bf16 i8 u8 i32 i64");
  }
  return *d;
}

ReduceOp parse_op_arg(const std::string& value) {
  const auto op = parse_reduce_op(value);
  if (!op) {
    throw UsageError("unknown reduction " + single_quoted(value) +
                     "; choose one of sum prod min max avg");
  }
  return *op;
}

bool parse_flag(const char* name, const std::string& value) {
  if (value != "0" && value != "1") {
    throw UsageError(std::string(name) + " expects 0 or 1, got " + single_quoted(value));
  }
  return value == "1";
}

// Leaves out the placement `value` does not ask for; `o` measures every form its collective has.
void parse_placement(const std::string& value, BenchOptions& o) {
  if (value == "both") return;
  if (value == "out-of-place" || value == "oop") {
    o.in_place = false;
    return;
  }
  if (value == "in-place" || value == "ip") {
    if (!o.in_place) {
      throw UsageError(std::string("--placement ") + value + ": " + collective_name(o.collective) +
                       " has no in-place form");
    }
    o.out_of_place = false;
    return;
  }
  throw UsageError("--placement expects both, out-of-place (oop) or in-place (ip), got " +
                   single_quoted(value));
}

}  // namespace

void add_bench_flags(Command& bench, BenchFlags& flags) {
  bench.footer("Run it on every rank, e.g. tpf run -n 4 -- tpf bench all_reduce -e 64M");
  bench
      .add_option("collective", flags.collective,
                  "all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|\n"
                  "gather|scatter|send_recv (ring shift; also sendrecv)|barrier")
      .type_name("COLLECTIVE");
  bench
      .add_option("-b,--minbytes", flags.min_bytes,
                  "smallest size in bytes, suffixes K/M/G (default 8); the size is the\n"
                  "largest buffer a rank touches (nccl-tests convention)")
      .type_name("MIN_BYTES");
  bench.add_option("-e,--maxbytes", flags.max_bytes, "largest size in bytes (default 32M)")
      .type_name("MAX_BYTES");
  bench
      .add_option("-f,--stepfactor", flags.factor,
                  "multiply the size by FACTOR each step (default 2)")
      .type_name("FACTOR");
  bench.add_option("-n,--iters", flags.iters, "timed iterations per size (default 20)")
      .type_name("ITERS");
  bench
      .add_option("-w,--warmup_iters,--warmup", flags.warmup,
                  "warm-up iterations per size (default 5)")
      .type_name("WARMUP");
  bench
      .add_option("-d,--datatype,--dtype", flags.dtype,
                  "f32 f64 f16 bf16 i8 u8 i32 i64 (default f32)")
      .type_name("DTYPE");
  bench.add_option("-o,--op", flags.op, "sum prod min max avg (default sum)").type_name("OP");
  bench.add_option("-r,--root", flags.root, "root of broadcast/reduce/gather/scatter (default 0)")
      .type_name("ROOT");
  bench
      .add_option("-c,--check", flags.check,
                  "1: check every result against the expected values (default 1)")
      .type_name("0|1");
  bench
      .add_option("--placement", flags.placement,
                  "both (default), out-of-place (oop) or in-place (ip): which forms\n"
                  "each size measures; the other's columns read N/A")
      .type_name("PLACEMENT");
  bench
      .add_option("--async", flags.async_calls,
                  "1: call the asynchronous form and wait for it; send_recv posts the\n"
                  "receive and the send, then waits for both; timed: the same, waiting\n"
                  "with a time limit (Work::wait_for, as Python's wait(timeout=...));\n"
                  "poll: the same, polling Work::test (yielding between polls)\n"
                  "(default 0)")
      .type_name("0|1|timed|poll");
  bench
      .add_option("--compute-us", flags.compute_us,
                  "the caller's own work per call, as a sleep of US microseconds: between\n"
                  "issuing and waiting with --async (overlap), else before the call; the\n"
                  "time column leaves it out (default 0)")
      .type_name("US");
  bench.add_option("--json", flags.json, "rank 0 also writes the results as JSON")
      .type_name("FILE");
}

BenchOptions bench_options(const BenchFlags& flags) {
  BenchOptions o;
  o.collective = parse_collective_arg(flags.collective);
  if (flags.min_bytes) o.min_bytes = parse_min_bytes(*flags.min_bytes);
  if (flags.max_bytes) o.max_bytes = parse_size("-e", *flags.max_bytes);
  o.factor = static_cast<size_t>(parse_int(flags.factor, "-f", static_cast<int>(o.factor), 2));
  o.iters = parse_int(flags.iters, "-n", o.iters, 1);
  o.warmup = parse_int(flags.warmup, "-w", o.warmup, 0);
  if (flags.dtype) o.dtype = parse_dtype_arg(*flags.dtype);
  if (flags.op) o.op = parse_op_arg(*flags.op);
  o.root = parse_int(flags.root, "-r", o.root, 0);
  if (flags.check) o.check = parse_flag("-c", *flags.check);
  o.in_place = collective_has_in_place(o.collective);
  if (flags.placement) parse_placement(*flags.placement, o);
  if (flags.async_calls) {
    const std::string& value = *flags.async_calls;
    if (value != "0" && value != "1" && value != "timed" && value != "poll") {
      throw UsageError("--async expects 0, 1, timed or poll, got " + single_quoted(value));
    }
    o.async_calls = value != "0";
    if (value == "timed") o.async_wait = AsyncWait::timed;
    if (value == "poll") o.async_wait = AsyncWait::poll;
  }
  o.compute_us = parse_int(flags.compute_us, "--compute-us", o.compute_us, 0);
  if (flags.json) {
    if (flags.json->empty()) throw UsageError("--json needs a file name");
    o.json_path = *flags.json;
  }
  if (o.min_bytes > o.max_bytes) {
    throw UsageError("-b " + std::to_string(o.min_bytes) + " is larger than -e " +
                     std::to_string(o.max_bytes) + "; the sweep goes from -b up to -e");
  }
  return o;
}

}  // namespace tpf::cli
