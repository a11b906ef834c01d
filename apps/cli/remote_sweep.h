// After a job started on other hosts (`tpf run --hosts`): remove what its ranks may have left in
// each host's /dev/shm, through the same remote shell that started them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tpf::cli {

// Runs `REMOTE_SHELL... HOST find /dev/shm -maxdepth 1 -name 'tpf-*-JOB_ID-*' -print -delete` on
// every host (once each, all at once) and reports per host how many segments it removed, or that
// the sweep failed or did not answer within `deadline` (the shell is then killed). Any uid: the
// ranks may run as another user there, and the job id (64 random bits) is this job's alone. The
// pattern reaches find unexpanded through ssh's remote shell (no such file in its working
// directory) and through shells that do not expand (ip netns exec). Never throws.
void sweep_remote_shm(const std::vector<std::string>& remote_shell,
                      const std::vector<std::string>& hosts, const std::string& job_id,
                      std::chrono::milliseconds deadline);

}  // namespace tpf::cli
