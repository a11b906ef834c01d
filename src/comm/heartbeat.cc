#include "comm/heartbeat.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "base/duration_text.h"
#include "coll/op_desc.h"
#include "tpf/error.h"

namespace tpf::detail {

std::vector<int> Heartbeat::watched_by(const topo::HostMap& hosts, int rank) {
  if (hosts.single_host() || hosts.local_rank(rank) != 0) return {};
  return hosts.ranks_on((hosts.host_of(rank) + 1) % hosts.hosts());
}

int Heartbeat::watcher_of(const topo::HostMap& hosts, int rank) {
  return hosts.ranks_on((hosts.host_of(rank) + hosts.hosts() - 1) % hosts.hosts())[0];
}

Heartbeat::Heartbeat(Config config, transport::UcxNetwork& network,
                     std::function<void(std::exception_ptr)> on_failure)
    : config_(std::move(config)),
      network_(network),
      on_failure_(std::move(on_failure)),
      watched_(watched_by(config_.hosts, config_.rank)),
      watcher_(watcher_of(config_.hosts, config_.rank)),
      started_(Clock::now()),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (stop_fd_ < 0) throw_system_error(ErrorCode::resource, config_.label + ": eventfd", errno);
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  thread_.join();
  ::close(stop_fd_);
  network_.send_goodbye(watcher_);
}

void Heartbeat::run() {
  const auto period = config_.lost_after / kBeatsPerLoss;
  const transport::WaitContext ctx =
      transport::WaitContext::with_timeout({}, [label = config_.label] { return label; });
  bool watching = true;
  auto next_beat = Clock::now();
  uint64_t seen = 0;  // the network's generation after this thread's last round
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const bool beat = Clock::now() >= next_beat;
    lock.unlock();
    try {
      if (beat) {
        network_.send_beat(watcher_, config_.calls ? config_.calls->current() : std::nullopt);
      }
      if (watching) {
        seen = network_.advance({}, ctx).generation;  // failure notices from other hosts
        if (beat) watch(Clock::now());
        network_.push_unsent();  // for a sender that went on (after the round of progress)
      }
    } catch (...) {
      watching = false;
      on_failure_(std::current_exception());
    }
    lock.lock();
    if (beat) next_beat = Clock::now() + period;
    // A round at most every kPushEvery; then, where nothing is left to push, asleep until the
    // network has news or the next beat (the header says why).
    const auto wake = std::min(next_beat, Clock::now() + transport::UcxNetwork::kPushEvery);
    cv_.wait_until(lock, wake, [this] { return stopping_; });
    if (stopping_ || !watching || network_.has_unsent()) continue;
    const auto until_beat = std::chrono::ceil<std::chrono::milliseconds>(next_beat - Clock::now());
    if (until_beat.count() <= 0) continue;
    lock.unlock();
    network_.wait_for_news(until_beat, seen, stop_fd_);
    lock.lock();
  }
}

void Heartbeat::watch(Clock::time_point now) {
  for (auto it = watched_.begin(); it != watched_.end();) {
    const int rank = *it;
    const transport::UcxNetwork::Heard heard = network_.heard_from(rank);
    if (heard.gone) {  // it destroyed its communicator: nothing to watch any more
      it = watched_.erase(it);
      continue;
    }
    ++it;
    compare_calls(rank, heard);
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - heard.last.value_or(started_));
    if (silent < config_.lost_after) continue;
    throw transport::ProcessLostError(
        ErrorCode::timeout,
        config_.label + ": " +
            network_.names().with_host(rank, config_.hosts.key(config_.hosts.host_of(rank))) +
            " has sent no heartbeat for " + base::format_seconds(silent) +
            ": its process is stopped or its host is unreachable " +
            "(TPF_HOST_LOST_S = " + base::format_seconds(config_.lost_after) + ")",
        rank < static_cast<int>(config_.processes.size()) ? config_.processes[rank] : 0);
  }
}

void Heartbeat::compare_calls(int rank, const transport::UcxNetwork::Heard& heard) {
  InCall& seen = in_call_[rank];
  if (!heard.in_call || !heard.last) {
    seen.beats = 0;
    return;
  }
  if (seen.beats == 0 || *heard.in_call != seen.call) {
    seen = {*heard.in_call, *heard.last, 1};
  } else if (*heard.last != seen.beat) {  // another beat in the same call
    seen.beat = *heard.last;
    ++seen.beats;
  }
  if (config_.calls == nullptr || seen.beats < kInCallBeats) return;
  const transport::Fingerprint& theirs = seen.call;
  const std::optional<transport::Fingerprint> mine = config_.calls->at(theirs.words[0]);
  if (!mine || *mine == theirs) return;  // not there yet (or long past), or the same call
  const topo::HostMap& hosts = config_.hosts;
  const transport::RankNames& names = network_.names();
  throw Error(ErrorCode::mismatch,
              config_.label + ": ranks called different collectives: " +
                  names.with_host(rank, hosts.key(hosts.host_of(rank))) + " is in " +
                  coll::describe_fingerprint(theirs) + ", " +
                  names.with_host(config_.rank, hosts.key(hosts.host_of(config_.rank))) +
                  " called " + coll::describe_fingerprint(*mine) + " (found by the heartbeat)");
}

}  // namespace tpf::detail
