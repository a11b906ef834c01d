#include "comm/process_failures.h"

#include <algorithm>

namespace tpf::detail {

ProcessFailures& ProcessFailures::instance() {
  // Never destroyed: communicators held in static storage may outlive any static of ours.
  static auto* failures = new ProcessFailures;
  return *failures;
}

void ProcessFailures::add(transport::ShmFabric* fabric) {
  std::lock_guard lock(mu_);
  fabrics_.push_back(fabric);
  if (first_) fabric->note_process_failure(*first_);
}

void ProcessFailures::remove(transport::ShmFabric* fabric) {
  std::lock_guard lock(mu_);
  fabrics_.erase(std::remove(fabrics_.begin(), fabrics_.end(), fabric), fabrics_.end());
}

void ProcessFailures::record(const transport::FailureRecord& root) {
  std::lock_guard lock(mu_);
  if (first_) return;
  first_ = root;
  for (transport::ShmFabric* fabric : fabrics_) fabric->note_process_failure(root);
}

}  // namespace tpf::detail
