// Rendezvous: turns a LaunchEnv into a connected store. Rank 0 serves the store itself when the
// launcher does not (mpirun, srun, torchrun). The store is never open to strangers:
//  - with TPF_JOB_SECRET and MASTER_PORT, rank 0 listens on 0.0.0.0:MASTER_PORT and every rank
//    connects to MASTER_ADDR presenting the secret (at least 16 characters); under torchrun with
//    the elastic agent's store on MASTER_PORT, rank 0 listens on a free port instead and
//    announces it in the agent's store (LaunchEnv::torch_store_key);
//  - otherwise all ranks must be on this host (else Error(bootstrap) saying how to set
//    TPF_JOB_SECRET): rank 0 listens on 127.0.0.1 (MASTER_PORT, or a free port; always
//    a free port under torchrun, whose MASTER_PORT is torch's), and tells the
//    other ranks the port, and a secret it made up when TPF_JOB_SECRET is unset, through a file
//    named after the job that only this user can read.
// Every rank's store client declares its job rank, so the store reports a rank that dies.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tpf/launch_env.h"
#include "tpf/store.h"

namespace tpf::bootstrap {

struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;  // set on the rank that hosts the store; keep it alive
                                           // until every rank is done with the store
  std::shared_ptr<Store> store;            // this rank's connection
};

// Connects this rank to the job's store within `timeout` (Error(timeout) or Error(bootstrap)
// otherwise). When rank 0 publishes a port file, it returns only after all world_size ranks have
// connected, and removes the file before returning (or throwing).
Rendezvous rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout);

// Where rank 0 publishes its store port (and made-up secret): /tmp/tpf-<uid>-<job_id>.port.
std::string port_file_path(const std::string& job_id);

}  // namespace tpf::bootstrap
