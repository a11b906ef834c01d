#include "comm/process_failures.h"

#include <unistd.h>

namespace tpf::detail {

ProcessFailures& ProcessFailures::instance() {
  // Never destroyed: communicators held in static storage may outlive any static of ours.
  static auto* failures = new ProcessFailures;
  return *failures;
}

void ProcessFailures::forget_if_forked() {
  const pid_t pid = ::getpid();
  if (pid == pid_) return;
  pid_ = pid;
  members_.clear();
  first_.reset();
  std::lock_guard watched_lock(watched_mu_);
  watched_.clear();
}

void ProcessFailures::add(transport::ShmFabric* fabric, OnProcessLost on_lost,
                          std::vector<uint64_t> heartbeat_watched) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  {
    std::lock_guard watched_lock(watched_mu_);
    for (uint64_t process : heartbeat_watched) ++watched_[process];
  }
  members_.push_back({fabric, std::move(on_lost), std::move(heartbeat_watched)});
  if (first_) fabric->note_process_failure(*first_);
}

void ProcessFailures::remove(transport::ShmFabric* fabric) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  std::lock_guard watched_lock(watched_mu_);
  std::erase_if(members_, [&](const Member& m) {
    if (m.fabric != fabric) return false;
    for (uint64_t process : m.heartbeat_watched)
      if (--watched_[process] == 0) watched_.erase(process);
    return true;
  });
}

void ProcessFailures::record(const transport::FailureRecord& root) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  if (!first_) {
    first_ = root;
    for (const Member& m : members_) m.fabric->note_process_failure(root);
  }
  if (root.lost_process == 0) return;
  {
    std::lock_guard lost_lock(lost_mu_);
    if (!lost_.emplace(root.lost_process, root).second) return;
  }
  // Under the lock, so no communicator is destroyed while it hears of the loss. Its failure comes
  // back here on this thread (the loss now noted, it calls no one) and changes no member.
  for (const Member& m : members_)
    if (m.on_lost) m.on_lost(root);
}

std::optional<transport::FailureRecord> ProcessFailures::first() {
  std::lock_guard lock(mu_);
  forget_if_forked();
  return first_;
}

void ProcessFailures::go_on() {
  std::lock_guard lock(mu_);
  forget_if_forked();
  first_.reset();
}

std::optional<transport::FailureRecord> ProcessFailures::lost(uint64_t process) {
  std::lock_guard lock(lost_mu_);
  const auto it = lost_.find(process);
  if (it == lost_.end()) return std::nullopt;
  return it->second;
}

bool ProcessFailures::watched_by_heartbeat(uint64_t process) {
  std::lock_guard lock(watched_mu_);
  return watched_.contains(process);
}

}  // namespace tpf::detail
