#include "bootstrap/store_watch.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "base/env_config.h"
#include "bootstrap/store_protocol.h"
#include "tpf/error.h"

namespace tpf::bootstrap {
namespace {

namespace proto = store_protocol;

// A store that accepted the connection answers the hello at once (as in TcpStoreClient).
constexpr std::chrono::seconds kHelloReplyTimeout{10};

std::atomic<bool> g_watching{false};

[[noreturn]] void end_this_process(const std::string& where, int rank) {
  const std::string line = "tpf: rank " + std::to_string(rank) + " (pid " +
                           std::to_string(::getpid()) + "): the job's " + where +
                           " closed its connection: its launcher has ended, so this rank ends "
                           "too (TPF_END_WITH_STORE=1)\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  ::_exit(128 + SIGKILL);  // not reached
}

// Blocks until the store closes `socket` (or the connection fails), then ends the process. Only
// POLLRDHUP is asked for: the store sends nothing on this connection, and a hang-up or an error
// is reported whatever is asked.
void watch(Socket socket, const std::string& where, int rank) {
  pollfd entry{socket.fd(), POLLRDHUP, 0};
  for (;;) {
    const int n = ::poll(&entry, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // cannot watch (out of memory): the process runs on, as before
    if (entry.revents & (POLLRDHUP | POLLHUP | POLLERR)) end_this_process(where, rank);
  }
}

// Connects and says hello as a client that is not a rank; the socket once the store said ok.
Socket connect_as_watcher(const std::string& host, uint16_t port, const std::string& secret,
                          Deadline deadline) {
  const std::string where = "store at " + host_port(host, port);
  Socket socket = connect_tcp(host, port, deadline);
  std::string frame;
  const size_t at = proto::begin_frame(frame);
  frame += proto::hello_payload(secret, -1, ::getpid());
  proto::finish_frame(frame, at);
  const Deadline reply_by = std::max(deadline, Clock::now() + kHelloReplyTimeout);
  auto check = [&](IoStatus status) {
    if (status == IoStatus::timeout) {
      throw Error(ErrorCode::timeout,
                  where + " did not answer the hello of this rank's watch in time");
    }
    if (status != IoStatus::ok) {
      throw Error(ErrorCode::bootstrap,
                  where + " closed the connection during the hello of this rank's watch");
    }
  };
  check(send_all(socket.fd(), frame.data(), frame.size(), reply_by));
  char header[proto::kFrameHeaderBytes];
  check(recv_all(socket.fd(), header, sizeof(header), reply_by));
  const uint32_t length = proto::decode_u32(header);
  if (length == 0 || length > proto::kMaxHelloBytes) {
    throw Error(ErrorCode::bootstrap, where + " sent a malformed reply (" + std::to_string(length) +
                                          " bytes) to this rank's watch; is it a tpfabric store?");
  }
  std::string reply(length, '\0');
  check(recv_all(socket.fd(), reply.data(), length, reply_by));
  proto::Reader reader(reply);
  const auto answer = reader.u8();
  if (!answer || *answer != static_cast<uint8_t>(proto::Status::ok)) {
    throw Error(ErrorCode::bootstrap,
                where + " refused the hello of this rank's watch (" +
                    (answer == static_cast<uint8_t>(proto::Status::auth_failed)
                         ? std::string("wrong job secret, TPF_JOB_SECRET")
                         : std::string("not a tpfabric store of this version?")) +
                    ")");
  }
  return socket;
}

}  // namespace

bool end_with_store_requested() {
  return base::env_request("TPF_END_WITH_STORE", "the rank ends when its job's store closes");
}

void end_process_when_store_closes(const std::string& host, uint16_t port,
                                   const std::string& secret, int rank, Deadline deadline) {
  if (g_watching.exchange(true)) return;
  try {
    Socket socket = connect_as_watcher(host, port, secret, deadline);
    // The watch takes none of the program's signals.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      std::thread(watch, std::move(socket), "store at " + host_port(host, port), rank).detach();
    } catch (...) {
      ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      throw;
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  } catch (...) {
    g_watching = false;
    throw;
  }
}

}  // namespace tpf::bootstrap
