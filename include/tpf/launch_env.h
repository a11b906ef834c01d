// Who am I in this job? Read from the environment that a launcher gives each rank:
// tpf run (TPF_*), Open MPI's mpirun (OMPI_COMM_WORLD_*), Slurm's srun (SLURM_*), torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
#pragma once

#include "tpf/export.h"

#include <cstdint>
#include <string>

namespace TPF_API tpf {

struct LaunchEnv {
  std::string launcher;  // "tpf", "mpirun", "srun", "torchrun"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string store_host;   // where the rendezvous store listens
  uint16_t store_port = 0;  // 0: rank 0 picks a port and publishes it through a file (see below)
  bool rank0_hosts_store = false;  // torchrun/mpirun/srun: rank 0 serves the store
  std::string secret;              // job secret (TPF_JOB_SECRET), may be empty
  std::string job_id;              // unique per job; names shared-memory segments
  // torchrun across hosts with the elastic agent's store (TORCHELASTIC_USE_AGENT_STORE=True):
  // store_host:store_port is that store, which the agent owns, so rank 0 serves the tpf store on a
  // free port and announces the port there under this key. Empty otherwise.
  std::string torch_store_key;
};

// Throws Error(bootstrap) naming the variables that are missing or malformed.
LaunchEnv detect_launch_env();

// True if any supported launcher's environment is present (detect_launch_env() would not report
// "no launcher environment found"); lets a program run alone as a group of one otherwise.
bool launch_env_present();

}  // namespace tpf
