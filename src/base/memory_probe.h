// Whether this process can read a range of its own memory, asked of the kernel without touching
// it: a transfer that failed may have failed on the caller's buffer (freed or protected memory,
// which UCX's zero-copy sends over TCP meet as EFAULT and report as a failed connection), and
// the error should then name that buffer, not the peer.
#pragma once

#include <cstddef>
#include <optional>

namespace tpf::base {

// True where every page of [data, data + bytes) is readable, false where one is not; nullopt
// where the kernel does not say (process_vm_readv refused, as some seccomp profiles do).
std::optional<bool> memory_readable(const void* data, size_t bytes);

}  // namespace tpf::base
