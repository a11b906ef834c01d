// A number that names this process among every process of a job, whatever host it runs on:
// failure records carry it to say which process a failure found lost (transport::FailureRecord),
// and each communicator learns its ranks' tokens while it is made, so a process one communicator
// found lost is known in the others that hold it. A pid would not do: two hosts (or two
// containers of one host with their own pid namespaces) reuse pids.
#pragma once

#include <cstdint>

namespace tpf::base {

// Random, never 0, drawn once per process (a forked child draws its own).
uint64_t this_process_token();

}  // namespace tpf::base
