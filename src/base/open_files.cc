#include "base/open_files.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include "tpf/error.h"

namespace tpf::base {
namespace {

uint64_t from_rlim(rlim_t value) {
  return value == RLIM_INFINITY ? kUnlimitedFiles : static_cast<uint64_t>(value);
}
rlim_t to_rlim(uint64_t value) {
  return value == kUnlimitedFiles ? RLIM_INFINITY : static_cast<rlim_t>(value);
}

// `soft`: the limit, which is what is open where not even the directory can be opened.
uint64_t count_open_descriptors(uint64_t soft) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return errno == EMFILE && soft != kUnlimitedFiles ? soft : 0;
  uint64_t entries = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++entries;
  }
  ::closedir(dir);
  return entries > 0 ? entries - 1 : 0;  // the directory's own descriptor was listed too
}

uint64_t add_saturating(uint64_t a, uint64_t b) {
  return a > kUnlimitedFiles - b ? kUnlimitedFiles : a + b;
}

}  // namespace

OpenFiles open_files() {
  OpenFiles files;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    files.soft = from_rlim(limit.rlim_cur);
    files.hard = from_rlim(limit.rlim_max);
  }
  files.open = count_open_descriptors(files.soft);
  return files;
}

OpenFiles make_room_for_files(uint64_t more, uint64_t spare) {
  OpenFiles files = open_files();
  const uint64_t wanted = add_saturating(add_saturating(files.open, more), spare);
  if (files.soft >= wanted || files.soft >= files.hard) return files;
  const uint64_t soft = std::min(wanted, files.hard);
  rlimit limit{to_rlim(soft), to_rlim(files.hard)};
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    throw_system_error(ErrorCode::system,
                       "raising the open-file limit (RLIMIT_NOFILE) to " + std::to_string(soft),
                       errno);
  }
  files.soft = soft;
  return files;
}

std::string encode_open_files(const OpenFiles& files) {
  return std::to_string(files.open) + "/" +
         (files.hard == kUnlimitedFiles ? std::string("unlimited") : std::to_string(files.hard));
}

std::optional<OpenFiles> decode_open_files(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  OpenFiles files;
  const char* end = text.data() + slash;
  const auto [open_end, open_ec] = std::from_chars(text.data(), end, files.open);
  if (open_ec != std::errc() || open_end != end || slash == 0) return std::nullopt;
  const std::string hard = text.substr(slash + 1);
  if (hard == "unlimited") {
    files.hard = kUnlimitedFiles;
  } else {
    const auto [hard_end, hard_ec] =
        std::from_chars(hard.data(), hard.data() + hard.size(), files.hard);
    if (hard_ec != std::errc() || hard_end != hard.data() + hard.size() || hard.empty())
      return std::nullopt;
  }
  files.soft = files.hard;  // not carried: what others need to know is how far it can go
  return files;
}

}  // namespace tpf::base
