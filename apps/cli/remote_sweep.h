// After a job started on other hosts (`tpf run --hosts`): what it left there goes, through the
// same remote shell that started its ranks, in one round of commands.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace tpf::cli {

// On every host of the job (`host_of_rank` names each rank's), once each and all at once:
// - searches for the processes the job left running (cli/remote_processes.h: by its id in their
//   environment; a rank whose remote shell was cut off, what a rank started in a session of its
//   own), and kills them (SIGKILL), saying which;
// - runs `find /dev/shm -maxdepth 1 -name 'tpf-*-JOB_ID-*' -print -delete` and reports how many
//   segments it removed. Any uid: the ranks may run as another user there, and the job id (64
//   random bits) is this job's alone. The pattern reaches find unexpanded through ssh's remote
//   shell (no such file in its working directory) and through shells that do not expand (ip
//   netns exec). A segment still mapped by a process killed beside the sweep goes with its
//   last mapping.
// A host whose command fails, or does not answer within `deadline` (the shell is then killed), is
// said. Never throws.
void sweep_hosts(const std::vector<std::string>& remote_shell,
                 const std::vector<std::string>& host_of_rank, const std::string& job_id,
                 std::chrono::milliseconds deadline);

}  // namespace tpf::cli
