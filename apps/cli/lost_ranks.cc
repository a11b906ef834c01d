#include "cli/lost_ranks.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "tpf/error.h"

namespace tpf::cli {

LostRanks::LostRanks() : event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!event_.valid()) throw_system_error(ErrorCode::system, "eventfd for lost ranks", errno);
}

TcpStoreServer::LostRankHandler LostRanks::handler() {
  return [this](int rank, int found_by, const std::string& reason) {
    {
      std::lock_guard lock(mu_);
      reports_.push_back({rank, found_by, reason});
    }
    const uint64_t one = 1;
    ssize_t n;
    do {
      n = ::write(event_.get(), &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  };
}

std::vector<LostRanks::Report> LostRanks::take() {
  uint64_t count;
  while (::read(event_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  std::lock_guard lock(mu_);
  std::vector<Report> taken;
  taken.swap(reports_);
  return taken;
}

}  // namespace tpf::cli
