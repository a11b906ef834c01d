#include "cli/bench_options.h"

#include <limits>
#include <optional>
#include <string_view>

#include "model/parse_number.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

// Far above any shared-memory machine today; catches a typo such as -e 64G before the
// allocation does, with a message instead of an out-of-memory kill.
constexpr size_t kMaxBenchBytes = size_t{16} << 30;

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

int parse_int(std::string_view flag, std::string_view value, int min_value) {
  try {
    return static_cast<int>(
        parse_integer(value, min_value, std::numeric_limits<int>::max(), std::string(flag)));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

size_t parse_size(std::string_view flag, std::string_view value) {
  const std::optional<size_t> v = parse_byte_size(value);
  if (!v || *v > kMaxBenchBytes) {
    throw UsageError("" + std::string(flag) +
                     " expects a byte count such as 8, 64K, 32M or 1G (at most 16G), got " +
                     quoted(value));
  }
  return *v;
}

// Maps long nccl-tests spellings onto the short flags.
std::string_view canonical_flag(std::string_view flag) {
  if (flag == "--minbytes") return "-b";
  if (flag == "--maxbytes") return "-e";
  if (flag == "--stepfactor") return "-f";
  if (flag == "--iters") return "-n";
  if (flag == "--warmup_iters" || flag == "--warmup") return "-w";
  if (flag == "--datatype" || flag == "--dtype") return "-d";
  if (flag == "--op") return "-o";
  if (flag == "--root") return "-r";
  if (flag == "--check") return "-c";
  return flag;
}

}  // namespace

const char* bench_usage() noexcept {
  return "usage: tpf bench COLLECTIVE [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR] [-n ITERS]\n"
         "                 [-w WARMUP] [-d DTYPE] [-o OP] [-r ROOT] [-c 0|1] [--json FILE]\n"
         "  COLLECTIVE  all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|\n"
         "              gather|scatter|send_recv (ring shift; also sendrecv)|barrier\n"
         "  -b, -e      smallest and largest size in bytes, suffixes K/M/G (default 8 .. 32M);\n"
         "              the size is the largest buffer a rank touches (nccl-tests convention)\n"
         "  -f          multiply the size by FACTOR each step (default 2)\n"
         "  -n, -w      timed iterations and warm-up iterations per size (default 20, 5)\n"
         "  -d          f32 f64 f16 bf16 i8 u8 i32 i64 (default f32)\n"
         "  -o          sum prod min max avg (default sum)\n"
         "  -r          root of broadcast/reduce/gather/scatter (default 0)\n"
         "  -c          1: check every result against the expected values (default 1)\n"
         "  --json FILE rank 0 also writes the results as JSON\n"
         "Run it on every rank, e.g. tpf run -n 4 -- tpf bench all_reduce -e 64M\n";
}

BenchOptions parse_bench_options(int argc, char** argv) {
  BenchOptions o;
  bool have_collective = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i] ? argv[i] : "";
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.empty() || arg[0] != '-') {
      if (have_collective) {
        throw UsageError("unexpected argument " + quoted(arg) +
                         " (the collective was already given)");
      }
      const auto c = parse_collective(arg);
      if (!c) {
        throw UsageError("unknown collective " + quoted(arg) + "; choose one of " +
                         collective_choices());
      }
      o.collective = *c;
      have_collective = true;
      continue;
    }
    // Flags take a value, either as the next argument or after '=' for long flags.
    std::string_view flag = arg;
    std::string_view value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    flag = canonical_flag(flag);
    static constexpr std::string_view kKnown[] = {"-b", "-e", "-f", "-n", "-w",
                                                  "-d", "-o", "-r", "-c", "--json"};
    bool known = false;
    for (auto k : kKnown) known = known || flag == k;
    if (!known) throw UsageError("unknown flag " + quoted(arg));
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError("flag " + quoted(arg) + " needs a value");
      value = argv[++i];
    }
    if (flag == "-b") {
      o.min_bytes = parse_size(flag, value);
      // The sweep multiplies the size by -f: from 0 it would never reach -e.
      if (o.min_bytes == 0) {
        throw UsageError(
            "-b expects a byte count of at least 1 (the sweep multiplies it by -f "
            "until it passes -e), got " +
            quoted(value));
      }
    } else if (flag == "-e") {
      o.max_bytes = parse_size(flag, value);
    } else if (flag == "-f") {
      o.factor = static_cast<size_t>(parse_int(flag, value, 2));
    } else if (flag == "-n") {
      o.iters = parse_int(flag, value, 1);
    } else if (flag == "-w") {
      o.warmup = parse_int(flag, value, 0);
    } else if (flag == "-d") {
      const auto d = parse_dtype(value);
      if (!d) {
        throw UsageError("unknown dtype " + quoted(value) +
                         "; choose one of f32 f64 f16 bf16 i8 u8 i32 i64");
      }
      o.dtype = *d;
    } else if (flag == "-o") {
      const auto op = parse_reduce_op(value);
      if (!op) {
        throw UsageError("unknown reduction " + quoted(value) +
                         "; choose one of sum prod min max avg");
      }
      o.op = *op;
    } else if (flag == "-r") {
      o.root = parse_int(flag, value, 0);
    } else if (flag == "-c") {
      if (value != "0" && value != "1") {
        throw UsageError("-c expects 0 or 1, got " + quoted(value));
      }
      o.check = value == "1";
    } else if (flag == "--json") {
      if (value.empty()) throw UsageError("--json needs a file name");
      o.json_path = value;
    }
  }
  if (!have_collective) {
    throw UsageError(std::string("which collective? choose one of ") + collective_choices());
  }
  if (o.min_bytes > o.max_bytes) {
    throw UsageError("-b " + std::to_string(o.min_bytes) + " is larger than -e " +
                     std::to_string(o.max_bytes) + "; the sweep goes from -b up to -e");
  }
  return o;
}

}  // namespace tpf::cli
