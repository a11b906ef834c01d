// rendezvous(): who serves the store, where it listens, and connecting every rank to it.

#include "bootstrap/rendezvous.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <optional>
#include <thread>

#include "bootstrap/socket.h"
#include "bootstrap/store_watch.h"
#include "bootstrap/torch_store.h"
#include "tpf/error.h"

namespace tpf::bootstrap {

namespace {

constexpr char kConnectedKey[] = "rendezvous/connected";
constexpr char kAllConnectedKey[] = "rendezvous/all_connected";
// A store reachable from other hosts is guarded by the job secret alone: it must not be guessable.
constexpr size_t kMinNetworkSecretChars = 16;

// 128 random bits as hex: the secret of a single-host job that has none.
std::string random_secret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_system_error(ErrorCode::system, "rendezvous: getrandom for the job secret", errno);
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

// How to pass an environment variable to every rank, per launcher.
std::string export_hint(const std::string& launcher) {
  if (launcher == "mpirun") return "and pass it on with `mpirun -x TPF_JOB_SECRET ...`";
  if (launcher == "srun") return "before srun, which passes the environment on (--export=ALL)";
  return "before " + launcher + ", which passes the environment to every rank";
}

[[noreturn]] void throw_network_secret_error(const LaunchEnv& env, const std::string& problem) {
  throw Error(
      ErrorCode::bootstrap,
      "rendezvous (" + env.launcher + ", rank " + std::to_string(env.rank) + "): rank 0 " +
          "would serve the rendezvous store on " +
          (env.torch_store_key.empty()
               ? "0.0.0.0:" + std::to_string(env.store_port) + " (MASTER_PORT)"
               : std::string("a free port of 0.0.0.0 announced in torchrun's agent store")) +
          ", reachable from other hosts, and " + problem +
          "; anyone who reaches that port could read and write the " +
          "job's keys. Set TPF_JOB_SECRET to the same random value of at least " +
          std::to_string(kMinNetworkSecretChars) + " characters on every rank, e.g. " +
          "`export TPF_JOB_SECRET=$(openssl rand -hex 16)` " + export_hint(env.launcher) +
          "; keep it out of shared scripts and logs");
}

std::chrono::milliseconds remaining(Deadline deadline) {
  return std::chrono::milliseconds(poll_timeout_ms(deadline));
}

// The published port (and, for a job without TPF_JOB_SECRET, the secret rank 0 made up), removed
// when this object dies: on success once every rank has connected, on failure while the exception
// unwinds, so no stale file outlives rank 0's rendezvous. Mode 0600: only this user's processes
// can read the secret.
class PortFile {
 public:
  PortFile(std::string path, uint16_t port, const std::string& secret) : path_(std::move(path)) {
    // Write a private temp file and rename it into place, so readers never see a partial file.
    const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw_system_error(ErrorCode::bootstrap, "rendezvous: create " + tmp, errno);
    const std::string text = std::to_string(port) + " " + std::to_string(::getpid()) + " " +
                             (secret.empty() ? "-" : secret) + "\n";
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

struct Published {
  uint16_t port = 0;
  std::string secret;  // empty: rank 0 used TPF_JOB_SECRET
};

// Reads "port pid secret" from the port file. Ignores files that are not ours or that others could
// read or write (another user could plant one to collect our secret) and files whose writer has
// exited (left by a crashed earlier job).
std::optional<Published> read_port_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  char buf[160] = {};
  const bool owned = ::fstat(fd, &st) == 0 && st.st_uid == ::getuid() && S_ISREG(st.st_mode) &&
                     (st.st_mode & (S_IRWXG | S_IRWXO)) == 0;
  const ssize_t n = owned ? ::read(fd, buf, sizeof(buf) - 1) : -1;
  ::close(fd);
  if (n <= 0) return std::nullopt;
  unsigned port = 0;
  long pid = 0;
  char secret[129] = {};
  if (std::sscanf(buf, "%u %ld %128s", &port, &pid, secret) != 3 || port == 0 || port > 65535 ||
      pid <= 0) {
    return std::nullopt;
  }
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::nullopt;
  Published out;
  out.port = static_cast<uint16_t>(port);
  if (std::string(secret) != "-") out.secret = secret;
  return out;
}

Published wait_for_port_file(const LaunchEnv& env, Deadline deadline,
                             std::chrono::milliseconds timeout) {
  const std::string path = port_file_path(env.job_id);
  // Polling the file system is the only signal available before a store exists; the deadline
  // bounds it and the backoff keeps it cheap.
  std::chrono::milliseconds backoff{1};
  for (;;) {
    if (auto published = read_port_file(path)) return *published;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw Error(
          ErrorCode::timeout,
          "rendezvous: rank " + std::to_string(env.rank) + " waited " +
              std::to_string(timeout.count()) + " ms for rank 0 to publish the store " +
              "port in " + path + "; is rank 0 running on this host with the same job id (" +
              env.job_id + ")? If the ranks run on several hosts, the launcher's local " +
              "world size (" + std::to_string(env.local_world_size) + ") is wrong: set " +
              "MASTER_ADDR/MASTER_PORT and TPF_JOB_SECRET (the same random value on every " +
              "rank, e.g. `export TPF_JOB_SECRET=$(openssl rand -hex 16)`)");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

// Rank 0's store: on every interface for a job across hosts, else on loopback. Under torchrun a
// taken MASTER_PORT is torch's (see resolve_torchrun_store): say so.
std::unique_ptr<TcpStoreServer> serve_store(const LaunchEnv& env, bool over_network, uint16_t port,
                                            const std::string& secret) {
  StoreServerLimits limits;
  limits.host_rank = 0;
  try {
    return std::make_unique<TcpStoreServer>(over_network ? "0.0.0.0" : "127.0.0.1", port, secret,
                                            limits);
  } catch (const Error& e) {
    if (env.launcher != "torchrun" || port == 0 || e.code() != ErrorCode::resource) throw;
    throw Error(ErrorCode::resource,
                std::string(e.what()) +
                    ". Under torchrun's c10d rendezvous MASTER_PORT is for worker rank 0's "
                    "torch.distributed store, which holds it once init_process_group ran: create "
                    "the tpf communicator first, or start torchrun with its static rendezvous "
                    "(--master_addr/--master_port), whose agent store tpf announces its own port "
                    "through");
  }
}

// The port rank 0 announced in torchrun's agent store, for a rank on another host.
uint16_t announced_port(const LaunchEnv& env, Deadline deadline) {
  const std::string text =
      TorchStoreClient(env.store_host, env.store_port, deadline).get(env.torch_store_key, deadline);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || port == 0 ||
      port > 65535) {
    throw Error(ErrorCode::bootstrap, "rendezvous (torchrun, rank " + std::to_string(env.rank) +
                                          "): '" + env.torch_store_key +
                                          "' in torchrun's agent store holds '" + text +
                                          "', not rank 0's store port");
  }
  return static_cast<uint16_t>(port);
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
  const bool end_with_store = end_with_store_requested();  // a bad value fails before connecting
  if (end_with_store && env.rank0_hosts_store) {
    // That store ends with rank 0: the others would be killed as it exits before them.
    throw Error(ErrorCode::invalid_argument,
                "TPF_END_WITH_STORE=1 is for ranks of tpf run, whose store its launcher serves; "
                "under " +
                    env.launcher + " rank 0 serves it, and its end is not the job's");
  }
  const Deadline deadline = deadline_after(timeout);
  Rendezvous out;
  std::optional<PortFile> port_file;
  std::string host = env.store_host.empty() ? "127.0.0.1" : env.store_host;
  uint16_t port = env.store_port;
  std::string secret = env.secret;

  if (env.rank0_hosts_store) {
    // Without TPF_JOB_SECRET the store must stay on this host: rank 0 listens on loopback, makes
    // up a secret and hands it to the other ranks in a file only this user can read. With a secret
    // and MASTER_PORT it listens where the other hosts' ranks can reach it.
    const bool single_host = env.local_world_size >= env.world_size;
    const bool over_network = env.store_port != 0 && !env.secret.empty();
    // torchrun's agent owns MASTER_PORT: the port goes through its store instead (launch_env.h).
    const bool via_torch = !env.torch_store_key.empty();
    if (env.secret.empty() && !single_host) {
      throw_network_secret_error(
          env, "TPF_JOB_SECRET is not set (the job spans several hosts: local world size " +
                   std::to_string(env.local_world_size) + " < world size " +
                   std::to_string(env.world_size) + ")");
    }
    if (over_network && env.secret.size() < kMinNetworkSecretChars) {
      throw_network_secret_error(
          env, "TPF_JOB_SECRET has only " + std::to_string(env.secret.size()) + " characters");
    }
    if (env.rank == 0) {
      if (secret.empty()) secret = random_secret();
      out.server = serve_store(env, over_network, via_torch ? 0 : env.store_port, secret);
      port = out.server->port();
      host = "127.0.0.1";
      if (!over_network) {
        port_file.emplace(port_file_path(env.job_id), port, env.secret.empty() ? secret : "");
      } else if (via_torch) {
        TorchStoreClient(env.store_host, env.store_port, deadline)
            .set(env.torch_store_key, std::to_string(port), deadline);
      }
    } else if (!over_network) {
      const Published published = wait_for_port_file(env, deadline, timeout);
      host = "127.0.0.1";
      port = published.port;
      if (secret.empty()) secret = published.secret;
    } else if (via_torch) {
      port = announced_port(env, deadline);
    }
  } else if (port == 0) {
    throw Error(ErrorCode::bootstrap, "rendezvous: no store port for rank " +
                                          std::to_string(env.rank) +
                                          " (the launcher must set TPF_STORE_ADDR=host:port)");
  }

  out.store = std::make_shared<TcpStoreClient>(host, port, secret, remaining(deadline), env.rank);
  if (end_with_store) end_process_when_store_closes(host, port, secret, env.rank, deadline);
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
