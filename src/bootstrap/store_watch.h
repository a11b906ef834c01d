// A rank that ends when its job's store does. `tpf run` serves the store, and a rank on its own
// machine dies with it (PR_SET_PDEATHSIG); a rank it started on another host through ssh has no
// such tie: killed with SIGKILL (by a user, the OOM killer), the launcher cannot signal it, the ssh
// session's end does not end it, and a rank that is computing, or waiting in a collective with a
// long deadline, would run on. So tpf run asks those ranks (TPF_END_WITH_STORE=1) to watch a
// connection of their own to its store and to end when the store closes it.
#pragma once

#include <cstdint>
#include <string>

#include "bootstrap/socket.h"

namespace tpf::bootstrap {

// Whether TPF_END_WITH_STORE asks this process to end with its job's store (1; 0 or unset: no).
// Throws Error(invalid_argument) for another value.
bool end_with_store_requested();

// Connects to the store at host:port (as a client that is not a rank, so that its end is no
// rank's death) and watches that connection from a thread of its own: once the store closes it
// (its process ended) or it fails (TCP keepalive: the store's host is gone), the process writes
// one line on stderr naming `rank` and kills itself with SIGKILL, as PR_SET_PDEATHSIG would. One
// watch per process: later calls do nothing. Throws Error(bootstrap) or Error(timeout) as
// TcpStoreClient's connect does.
void end_process_when_store_closes(const std::string& host, uint16_t port,
                                   const std::string& secret, int rank, Deadline deadline);

}  // namespace tpf::bootstrap
