// The engine of `tpf run`: starts N ranks of a program on this machine (or, with hosts, on several
// machines through a remote shell, as mpirun does), serves their rendezvous
// store, relays their output, forwards signals, and tears the job down when a rank fails. Before
// it stops ranks that are still running (a rank failed and the grace is over, or --job-timeout),
// and on SIGUSR2, it asks them for their flight recorders and prints one summary of where every
// rank is (apps/cli/flight_dumps.h).
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
  // --keep-going: a rank that fails does not stop the others, which may go on without it
  // (Communicator::shrink); the exit status still says that a rank failed. With it or without, a
  // rank the job finds lost is ended at once (cli/lost_ranks.h).
  bool keep_going = false;
  // A rank of this machine seen stopped this long when no other rank runs is found lost by the
  // launcher itself (TPF_HOST_LOST_S; cli/stopped_ranks.h). Zero: never.
  std::chrono::milliseconds stopped_lost_after{0};
  // Stop the job after this long (--job-timeout): ask the ranks for their flight recorders, print
  // where each one is, then SIGTERM and, after the grace, SIGKILL. Exit code kExitJobTimeout.
  std::optional<std::chrono::milliseconds> job_timeout;
  // How long to wait for the ranks' flight recorder dumps once they were asked
  // (TPF_RUN_DUMP_WAIT_S).
  std::chrono::milliseconds dump_wait{5000};
  std::vector<std::string> command;  // program and its arguments; command[0] is the program
  // --hosts: ranks on these hosts, in this order (host 0 gets ranks 0 .. ranks-1, ...), each
  // started as REMOTE_SHELL... HOST env VARIABLES... PROGRAM ARGS. Empty: every rank here.
  struct HostSlots {
    std::string host;
    int ranks = 0;
  };
  std::vector<HostSlots> hosts;
  std::vector<std::string> remote_shell{"ssh"};
  // Where the store listens (with hosts): an address the ranks can reach, which they are given.
  std::string store_bind;
  // --rail-devices: local rank l (on every host) gets UCX_NET_DEVICES=rail_devices[l % size] (and
  // an empty TPF_RAIL_DEVICES), in
  // place of the launcher's own, so that each rank of a host crosses the network through the NIC
  // of its rail (coll/network_cost.h: per rail where the ranks of a host have devices of their
  // own). {"auto"}: every rank gets TPF_RAIL_DEVICES=auto, a device next to its cores
  // (topo/network_devices.h). Empty: the ranks keep the launcher's UCX_NET_DEVICES, if any.
  std::vector<std::string> rail_devices;
};

// Exit codes of `tpf run` beyond kExitOk / kExitUsage.
inline constexpr int kExitRankFailed = 1;  // a rank exited non-zero or was killed by a signal
inline constexpr int kExitCannotStart =
    127;                                     // the program could not be executed (shell convention)
inline constexpr int kExitJobTimeout = 124;  // the job ran past --job-timeout (as timeout(1))
// 128 + S: tpf run itself received signal S (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and forwarded it.

// Runs the job to completion and returns tpf run's exit code. Throws tpf::Error when the job
// cannot be set up (no free port, fork failure, too many open files).
int launch_job(const LaunchOptions& options);

}  // namespace tpf::cli
