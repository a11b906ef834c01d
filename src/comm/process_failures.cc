#include "comm/process_failures.h"

#include <unistd.h>

#include <algorithm>

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
  fabrics_.clear();
  first_.reset();
}

void ProcessFailures::add(transport::ShmFabric* fabric) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  fabrics_.push_back(fabric);
  if (first_) fabric->note_process_failure(*first_);
}

void ProcessFailures::remove(transport::ShmFabric* fabric) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  fabrics_.erase(std::remove(fabrics_.begin(), fabrics_.end(), fabric), fabrics_.end());
}

void ProcessFailures::record(const transport::FailureRecord& root) {
  std::lock_guard lock(mu_);
  forget_if_forked();
  if (first_) return;
  first_ = root;
  for (transport::ShmFabric* fabric : fabrics_) fabric->note_process_failure(root);
}

std::optional<transport::FailureRecord> ProcessFailures::first() {
  std::lock_guard lock(mu_);
  forget_if_forked();
  return first_;
}

}  // namespace tpf::detail
