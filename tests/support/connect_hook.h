// Fault injection under the network library: a test makes a connection fail at a moment UCX
// gives no handle on (between its connect() and its first send), by interposing connect() for
// the whole test binary. Without a hook armed, connect() is the C library's, unchanged.
#pragma once

#include <cstdint>
#include <functional>

namespace tpf::testing {

// In this process, `after` runs once, right after the next connect() of an IPv4 socket to a port
// other than `except_port` (a test's store) returns, whatever it returned; it gets the socket.
// A later call replaces a hook not yet run.
void after_next_connect(uint16_t except_port, std::function<void(int fd)> after);

}  // namespace tpf::testing
