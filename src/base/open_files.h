// The open-file limit (RLIMIT_NOFILE) against what a process is about to open. A communicator
// holds a descriptor per peer (a socket per rank on another host, a pidfd per rank on its own),
// and a launcher a few per rank, which past a thousand peers exceeds the soft limit most systems
// start processes with (1,024). Below the hard limit a process may raise its own soft limit, as
// Open MPI's launcher does; above it only an administrator can help, so that is told up front
// instead of as a failed connect() deep inside UCX.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tpf::base {

inline constexpr uint64_t kUnlimitedFiles = UINT64_MAX;  // RLIM_INFINITY

struct OpenFiles {
  uint64_t open = 0;  // descriptors open now (/proc/self/fd; 0 where there is no /proc)
  uint64_t soft = kUnlimitedFiles;
  uint64_t hard = kUnlimitedFiles;

  // How many more descriptors this process could open by raising its soft limit.
  uint64_t room() const { return hard > open ? hard - open : 0; }
};

OpenFiles open_files();

// Raises the soft limit, as far as the hard limit allows, so that `more` descriptors fit beside
// those open now with `spare` left for the program's own files; never lowers it. Returns the state
// after. Throws Error(system) where setrlimit refuses.
OpenFiles make_room_for_files(uint64_t more, uint64_t spare);

// "OPEN/HARD" ("OPEN/unlimited"): what one process tells others of its limit.
std::string encode_open_files(const OpenFiles& files);
// nullopt for a text encode_open_files did not write.
std::optional<OpenFiles> decode_open_files(const std::string& text);

}  // namespace tpf::base
