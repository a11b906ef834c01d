#include "support/connect_hook.h"

#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <mutex>
#include <utility>

namespace tpf::testing {
namespace {

struct ArmedHook {
  std::mutex mu;
  uint16_t except_port = 0;
  std::function<void(int)> after;  // empty: none armed
};

ArmedHook& armed() {
  static ArmedHook hook;
  return hook;
}

// The hook for a connect() to `address`, taken (it runs once), or an empty one.
std::function<void(int)> take_hook_for(const sockaddr* address) {
  if (address == nullptr || address->sa_family != AF_INET) return {};
  ArmedHook& hook = armed();
  std::lock_guard lock(hook.mu);
  const uint16_t port = ntohs(reinterpret_cast<const sockaddr_in*>(address)->sin_port);
  if (!hook.after || port == hook.except_port) return {};
  return std::exchange(hook.after, {});
}

}  // namespace

void after_next_connect(uint16_t except_port, std::function<void(int fd)> after) {
  ArmedHook& hook = armed();
  std::lock_guard lock(hook.mu);
  hook.except_port = except_port;
  hook.after = std::move(after);
}

}  // namespace tpf::testing

// The executable's definition comes first in the dynamic lookup, so the network library's calls
// land here too.
extern "C" int connect(int fd, const sockaddr* address, socklen_t length) {
  using Connect = int (*)(int, const sockaddr*, socklen_t);
  static const auto next = reinterpret_cast<Connect>(::dlsym(RTLD_NEXT, "connect"));
  const int result = next(fd, address, length);
  if (std::function<void(int)> after = tpf::testing::take_hook_for(address)) {
    const int saved = errno;
    after(fd);
    errno = saved;
  }
  return result;
}
