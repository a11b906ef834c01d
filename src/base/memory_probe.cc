#include "base/memory_probe.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>

namespace tpf::base {

std::optional<bool> memory_readable(const void* data, size_t bytes) {
  if (bytes == 0) return true;
  // One byte of every page the range touches, up to kBatch pages a call: the kernel reads them
  // through the page tables and stops at the first it cannot.
  constexpr size_t kBatch = 1024;  // IOV_MAX
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t last = first + bytes - 1;
  std::array<char, kBatch> sink;
  std::array<iovec, kBatch> pages;
  uintptr_t at = first;
  while (at <= last && at >= first) {
    size_t count = 0;
    for (; count < kBatch && at <= last && at >= first; ++count) {
      pages[count] = {reinterpret_cast<void*>(at), 1};
      at = (at / page + 1) * page;  // the next page's first byte (0 once past the top)
    }
    const iovec into{sink.data(), count};
    const ssize_t read = ::process_vm_readv(::getpid(), &into, 1, pages.data(), count, 0);
    if (read == static_cast<ssize_t>(count)) continue;
    if (read >= 0 || errno == EFAULT) return false;  // stopped at (or failed on) a page
    return std::nullopt;
  }
  return true;
}

}  // namespace tpf::base
