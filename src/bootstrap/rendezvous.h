// Rendezvous: turns a LaunchEnv into a connected store. Rank 0 serves the store itself when the
// launcher does not (mpirun, srun, torchrun); on one host without MASTER_ADDR/MASTER_PORT it binds
// a free port and tells the other ranks through a small file named after the job.
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

// Where rank 0 publishes its store port: /tmp/tpf-<uid>-<job_id>.port.
std::string port_file_path(const std::string& job_id);

}  // namespace tpf::bootstrap
