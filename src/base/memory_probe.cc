#include "base/memory_probe.h"

#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>

namespace tpf::base {

std::optional<bool> memory_readable(const void* data, size_t bytes) {
  if (bytes == 0) return true;
  // One byte of every page the range touches (its first byte in the first page), up to kBatch
  // pages a call: the kernel reads them through the page tables and stops at the first it cannot.
  constexpr size_t kBatch = 1024;  // IOV_MAX
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first_page = first / page;
  const uintptr_t last_page = (first + (bytes - 1)) / page;
  std::array<char, kBatch> sink;
  std::array<iovec, kBatch> pages;
  for (uintptr_t next = first_page; next <= last_page;) {
    size_t count = 0;
    for (; count < kBatch && next <= last_page; ++count, ++next) {
      const uintptr_t at = next == first_page ? first : next * page;
      pages[count] = {reinterpret_cast<void*>(at), 1};
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
