// The engine of `tpf run`: starts N ranks of a program on this machine, serves their rendezvous
// store, relays their output, forwards signals, and tears the job down when a rank fails.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tpf/topology.h"

namespace tpf::cli {

struct LaunchOptions {
  int world_size = 0;
  BindPolicy bind = BindPolicy::none;
  std::optional<std::string> timeout_s;  // exported as TPF_TIMEOUT when set
  bool tag_output = false;
  // How long the other ranks may keep running after one fails (to report their own view of the
  // failure) before SIGTERM, and again between SIGTERM and SIGKILL.
  std::chrono::milliseconds grace{3000};
  std::vector<std::string> command;  // program and its arguments; command[0] is the program
};

// Exit codes of `tpf run` beyond kExitOk / kExitUsage.
inline constexpr int kExitRankFailed = 1;  // a rank exited non-zero or was killed by a signal
inline constexpr int kExitCannotStart =
    127;  // the program could not be executed (shell convention)
// 128 + S: tpf run itself received signal S (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and forwarded it.

// Runs the job to completion and returns tpf run's exit code. Throws tpf::Error when the job
// cannot be set up (no free port, fork failure, too many open files).
int launch_job(const LaunchOptions& options);

}  // namespace tpf::cli
