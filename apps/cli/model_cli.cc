#include "cli/model_cli.h"

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <thread>

#include "cli/commands.h"
#include "model/parse_number.h"
#include "tensor/blas.h"
#include "tpf/error.h"
#include "tpf/launch_env.h"

namespace tpf::cli {

FlagParser::FlagParser(int argc, char** argv, const std::vector<std::string>& flags,
                       const std::vector<std::string>& switches) {
  auto known = [](const std::vector<std::string>& list, const std::string& f) {
    for (const auto& s : list) {
      if (s == f) return true;
    }
    return false;
  };
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    if (known(switches, arg)) {
      if (inline_value) throw UsageError(arg + " takes no value");
      values_[arg] = "1";
    } else if (known(flags, arg)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw UsageError(arg + " needs a value");
        value = argv[++i];
      }
      values_[arg] = value;
    } else {
      throw UsageError("unknown argument '" + arg + "'");
    }
  }
}

std::string FlagParser::get(const std::string& flag, const std::string& fallback) const {
  const auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

std::string FlagParser::required(const std::string& flag) const {
  if (!has(flag)) throw UsageError(flag + " is required");
  return get(flag);
}

int64_t FlagParser::get_int(const std::string& flag, int64_t fallback, int64_t min_value,
                            int64_t max_value) const {
  if (!has(flag)) return fallback;
  try {
    return parse_integer(get(flag), min_value, max_value, flag);
  } catch (const Error& e) {
    throw UsageError(e.what());  // a command-line mistake: exit status 2 with the usage hint
  }
}

double FlagParser::get_double(const std::string& flag, double fallback, double min_value) const {
  if (!has(flag)) return fallback;
  try {
    return parse_real(get(flag), min_value, std::numeric_limits<double>::max(), flag);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

namespace {

Communicator make_world(std::unique_ptr<TcpStoreServer>& server) {
  if (launch_env_present()) return Communicator::from_env();
  server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, "");
  return Communicator::create(0, 1, "127.0.0.1:" + std::to_string(server->port()));
}

}  // namespace

World::World() : comm_(make_world(server_)) {
  // A training step allocates and frees activations of many MB. By default glibc serves those
  // with mmap and returns them with munmap, so every step page-faults them in again (measured:
  // 20 % of a gpt-6x768 step). Keep blocks up to glibc's 32 MiB maximum in the heap instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (launch_env_present()) local_ranks_ = std::max(1, detect_launch_env().local_world_size);
}

int configure_blas_threads(const FlagParser& flags, int local_ranks) {
  // The machine's share of this rank, capped by the CPUs it may run on (`tpf run` pins each rank
  // to its share of the cores; more threads than CPUs would only take turns).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = std::max(1, cores / std::max(1, local_ranks));
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    threads = std::min(threads, std::max(1, CPU_COUNT(&allowed)));
  }
  threads = static_cast<int>(flags.get_int("--threads", threads, 1, 4096));
  set_blas_threads(threads);
  return threads;
}

}  // namespace tpf::cli
