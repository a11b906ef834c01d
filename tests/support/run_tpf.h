// Runs the real `tpf` binary (TPF_BINARY) as a user would, bounded in time, collecting what it
// prints and returns.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace tpf::testing {

struct Outcome {
  int exit_code = -1;  // -1 if killed by a signal
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;
};

// Called with tpf's pid and all of its stdout so far, after each chunk arrives.
using OnStdout = std::function<void(pid_t, const std::string&)>;

// Runs `tpf ARGS...` with extra environment entries ("NAME=value"), collecting stdout and stderr.
// Everything is bounded by `limit`: on expiry tpf is SIGKILLed (its ranks follow through their
// parent-death signal) and the outcome says timed_out.
Outcome run_tpf(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                OnStdout on_stdout = {},
                std::chrono::milliseconds limit = std::chrono::milliseconds(20000));

// Whether process `pid` (not a child of this one: a rank tpf started) ends within 30 s; it is
// killed if not, so that no test leaves it behind. Bounded: the end is an event (a pidfd becomes
// readable).
bool ends_soon(pid_t pid);

std::vector<std::string> lines_of(const std::string& text);
bool contains(const std::string& haystack, const std::string& needle);

}  // namespace tpf::testing
