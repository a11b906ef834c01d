// rendezvous(): who serves the store, where it listens, and connecting every rank to it.

#include "bootstrap/rendezvous.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <thread>

#include "bootstrap/socket.h"
#include "tpf/error.h"

namespace tpf::bootstrap {

namespace {

constexpr char kConnectedKey[] = "rendezvous/connected";
constexpr char kAllConnectedKey[] = "rendezvous/all_connected";

std::chrono::milliseconds remaining(Deadline deadline) {
  return std::chrono::milliseconds(poll_timeout_ms(deadline));
}

// The published port, removed when this object dies: on success once every rank has connected,
// on failure while the exception unwinds, so no stale file outlives rank 0's rendezvous.
class PortFile {
 public:
  PortFile(std::string path, uint16_t port) : path_(std::move(path)) {
    // Write a private temp file and rename it into place, so readers never see a partial file.
    const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw_system_error(ErrorCode::bootstrap, "rendezvous: create " + tmp, errno);
    const std::string text = std::to_string(port) + " " + std::to_string(::getpid()) + "\n";
    const bool wrote = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const int write_err = errno;
    ::close(fd);
    if (!wrote) {
      ::unlink(tmp.c_str());
      throw_system_error(ErrorCode::bootstrap, "rendezvous: write " + tmp, write_err);
    }
    if (::rename(tmp.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw_system_error(ErrorCode::bootstrap,
                         "rendezvous: publish the store port as " + path_ +
                             " (remove it if another user owns it, or set TPF_JOB_ID)",
                         err);
    }
  }
  ~PortFile() { ::unlink(path_.c_str()); }
  PortFile(const PortFile&) = delete;
  PortFile& operator=(const PortFile&) = delete;

 private:
  std::string path_;
};

// Reads "port pid" from the port file. Ignores files that are not ours (another user could plant
// one to collect our secret) and files whose writer has exited (left by a crashed earlier job).
std::optional<uint16_t> read_port_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  char buf[64] = {};
  const bool owned = ::fstat(fd, &st) == 0 && st.st_uid == ::getuid() && S_ISREG(st.st_mode) &&
                     (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
  const ssize_t n = owned ? ::read(fd, buf, sizeof(buf) - 1) : -1;
  ::close(fd);
  if (n <= 0) return std::nullopt;
  unsigned port = 0;
  long pid = 0;
  if (std::sscanf(buf, "%u %ld", &port, &pid) != 2 || port == 0 || port > 65535 || pid <= 0) {
    return std::nullopt;
  }
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::nullopt;
  return static_cast<uint16_t>(port);
}

uint16_t wait_for_port_file(const LaunchEnv& env, Deadline deadline,
                            std::chrono::milliseconds timeout) {
  const std::string path = port_file_path(env.job_id);
  // Polling the file system is the only signal available before a store exists; the deadline
  // bounds it and the backoff keeps it cheap.
  std::chrono::milliseconds backoff{1};
  for (;;) {
    if (const auto port = read_port_file(path)) return *port;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw Error(ErrorCode::timeout,
                  "rendezvous: rank " + std::to_string(env.rank) + " waited " +
                      std::to_string(timeout.count()) + " ms for rank 0 to publish the store " +
                      "port in " + path + "; is rank 0 running with the same job id (" +
                      env.job_id + ")? Set MASTER_ADDR/MASTER_PORT to use a fixed address");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string port_file_path(const std::string& job_id) {
  return "/tmp/tpf-" + std::to_string(::getuid()) + "-" + job_id + ".port";
}

Rendezvous rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    throw Error(ErrorCode::invalid_argument, "rendezvous: rank " + std::to_string(env.rank) +
                                                 " is not in [0, world size " +
                                                 std::to_string(env.world_size) + ")");
  }
  const Deadline deadline = deadline_after(timeout);
  Rendezvous out;
  std::optional<PortFile> port_file;
  std::string host = env.store_host.empty() ? "127.0.0.1" : env.store_host;
  uint16_t port = env.store_port;

  if (env.rank0_hosts_store && env.rank == 0) {
    // A published (port 0) store serves only this host; a fixed port must be reachable from
    // the other hosts' ranks, whatever address MASTER_ADDR names.
    const std::string bind_host = env.store_port == 0 ? "127.0.0.1" : "0.0.0.0";
    out.server = std::make_unique<TcpStoreServer>(bind_host, env.store_port, env.secret);
    port = out.server->port();
    host = "127.0.0.1";
    if (env.store_port == 0) port_file.emplace(port_file_path(env.job_id), port);
  } else if (env.rank0_hosts_store && env.store_port == 0) {
    port = wait_for_port_file(env, deadline, timeout);
  } else if (port == 0) {
    throw Error(ErrorCode::bootstrap, "rendezvous: no store port for rank " +
                                          std::to_string(env.rank) +
                                          " (the launcher must set TPF_STORE_ADDR=host:port)");
  }

  out.store = std::make_shared<TcpStoreClient>(host, port, env.secret, remaining(deadline));
  const int64_t connected = out.store->add(kConnectedKey, 1);
  if (connected == env.world_size) out.store->set(kAllConnectedKey, "1");

  if (port_file) {
    // The file may go only when nobody still needs to read it.
    try {
      out.store->get(kAllConnectedKey, remaining(deadline));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) throw;
      const int64_t seen = out.store->add(kConnectedKey, 0);
      throw Error(ErrorCode::timeout,
                  "rendezvous: only " + std::to_string(seen) + " of " +
                      std::to_string(env.world_size) + " ranks connected to the store within " +
                      std::to_string(timeout.count()) +
                      " ms; check that every rank started with the same job id (" + env.job_id +
                      ") and world size");
    }
    port_file.reset();
  }
  return out;
}

}  // namespace tpf::bootstrap
