#include "transport/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <thread>
#include <utility>

#include "base/byte_size.h"
#include "topo/numa_placement.h"
#include "tpf/error.h"

namespace tpf::transport {
namespace {

// Closes a file descriptor when it goes out of scope.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// `populate`: build the page tables now. Page faults are slow (badly so on some VMs); taking them
// at setup keeps them out of the first collectives.
void* map_shared(int fd, size_t bytes, const std::string& name, bool populate) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (data == MAP_FAILED) throw_system_error(ErrorCode::system, "mmap of " + name, errno);
  return data;
}

}  // namespace

std::string shm_user_prefix() { return "/tpf-" + std::to_string(::getuid()) + "-"; }

std::string shm_job_prefix(const std::string& job_id) { return shm_user_prefix() + job_id + "-"; }

namespace {

bool has_orphan_suffix(const std::string& name) {
  const std::string suffix = ShmSegment::kOrphanSuffix;
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Takes the creator's shared lock. Contended only by a sweeper that holds the exclusive lock for
// a moment (it saw the segment still empty and lets go), so a short bounded retry suffices.
void take_creator_lock(int fd, const std::string& name) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      throw_system_error(ErrorCode::system, "flock of " + name, errno);
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      throw Error(ErrorCode::system,
                  "flock of " + name +
                      ": another process held the segment "
                      "locked for 5 s (a stopped tpfabric process cleaning up?)");
    }
    std::this_thread::yield();
  }
}

}  // namespace

namespace {

// Calls visit(dir_fd, name) for every entry of /dev/shm whose name starts with `prefix` (with
// shm_open's leading '/', which names in /dev/shm lack).
template <class Visit>
void for_each_segment_name(const std::string& prefix, Visit&& visit) {
  const std::string want = prefix.empty() || prefix[0] != '/' ? prefix : prefix.substr(1);
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, want.size(), want) == 0) visit(::dirfd(dir), name);
  }
  ::closedir(dir);
}

}  // namespace

size_t remove_orphan_segments(const std::string& prefix, size_t* held) {
  if (held != nullptr) *held = 0;
  size_t removed = 0;
  const uid_t me = ::getuid();
  for_each_segment_name(prefix, [&](int dir, const std::string& name) {
    if (!has_orphan_suffix(name)) return;
    const int fd = ::openat(dir, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;  // gone meanwhile, or not ours to read
    FdGuard guard{fd};
    // The lock first, then the size: a creator takes its lock before it sizes the segment, so a
    // sized segment nobody holds is an orphan, and an empty one may be a creator between the two.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // its creator is alive
      if (held != nullptr) ++*held;
      return;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || info.st_uid != me || !S_ISREG(info.st_mode) ||
        info.st_size == 0) {
      return;
    }
    if (::unlinkat(dir, name.c_str(), 0) == 0) ++removed;
  });
  return removed;
}

void unlink_segment_name(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

size_t segments_bytes(const std::string& prefix) {
  size_t total = 0;
  const uid_t me = ::getuid();
  for_each_segment_name(prefix, [&](int dir, const std::string& name) {
    struct stat info {};
    if (::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_uid == me &&
        S_ISREG(info.st_mode)) {
      total += static_cast<size_t>(info.st_size);
    }
  });
  return total;
}

size_t shm_free_bytes() {
  struct statvfs info {};
  if (::statvfs("/dev/shm", &info) != 0) return 0;
  return static_cast<size_t>(info.f_bavail) * info.f_frsize;
}

namespace {

[[noreturn]] void throw_shm_too_small(size_t bytes, const std::string& what) {
  throw Error(ErrorCode::resource,
              what + " needs " + base::format_bytes(static_cast<double>(bytes)) +
                  " of shared memory for this rank but /dev/shm has "
                  "only " +
                  base::format_bytes(static_cast<double>(shm_free_bytes())) +
                  " free. Make /dev/shm larger (e.g. `mount -o "
                  "remount,size=8G /dev/shm`, or `docker run --shm-size=8g`) or lower "
                  "TPF_SHM_BUFFER_BYTES");
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t bytes, const std::string& what) {
  // Checked first so that an impossible request fails at once, before tmpfs hands out pages.
  const size_t free_bytes = shm_free_bytes();
  if (free_bytes != 0 && bytes > free_bytes) throw_shm_too_small(bytes, what);
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw_system_error(ErrorCode::system, "shm_open(" + name + ") for " + what, errno);
  FdGuard guard{fd};
  ShmSegment segment;
  segment.name_ = name;
  segment.owner_linked_ = true;
  if (has_orphan_suffix(name)) {
    take_creator_lock(fd, name);
    segment.lock_fd_ = fd;  // kept open (and locked) until unlink()
    guard.fd = -1;
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    segment.unlink();
    throw_system_error(ErrorCode::system, "ftruncate of " + name, err);
  }
  segment.data_ = map_shared(fd, bytes, name, /*populate=*/false);
  segment.size_ = bytes;
  // Placement first (shmem applies a mapping's policy to the pages it allocates later), then
  // reserve the pages now: tmpfs otherwise grants them lazily and a full /dev/shm would kill the
  // process with SIGBUS in the middle of a collective.
  topo::bind_area_to_local_numa(segment.data_, bytes);
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    segment.release();
    if (err == ENOSPC) throw_shm_too_small(bytes, what);
    throw_system_error(ErrorCode::system, "posix_fallocate of " + name, err);
  }
#ifdef MADV_POPULATE_WRITE
  ::madvise(segment.data_, bytes, MADV_POPULATE_WRITE);  // best effort (Linux 5.14+)
#endif
  segment.size_ = bytes;
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw_system_error(ErrorCode::bootstrap, "shm_open(" + name + ") of a peer", errno);
  FdGuard guard{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw_system_error(ErrorCode::system, "fstat " + name, errno);
  if (static_cast<size_t>(info.st_size) < bytes) {
    throw Error(ErrorCode::bootstrap, "peer segment " + name + " has " +
                                          std::to_string(info.st_size) + " bytes, expected " +
                                          std::to_string(bytes));
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.data_ = map_shared(fd, bytes, name, /*populate=*/false);
  segment.size_ = bytes;
  return segment;
}

void ShmSegment::populate(size_t offset, size_t bytes) const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, (offset + bytes + page - 1) / page * page);
  if (data_ == nullptr || begin >= end) return;
  auto* first = static_cast<std::byte*>(data_) + begin;
#ifdef MADV_POPULATE_READ
  if (::madvise(first, end - begin, MADV_POPULATE_READ) == 0) return;
#endif
  // Kernels before 5.14: a read of every page faults it in.
  for (size_t at = 0; at < end - begin; at += page) {
    (void)*static_cast<volatile const std::byte*>(first + at);
  }
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_linked_(std::exchange(other.owner_linked_, false)),
      lock_fd_(std::exchange(other.lock_fd_, -1)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_linked_ = std::exchange(other.owner_linked_, false);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::unlink() {
  if (owner_linked_) {
    ::shm_unlink(name_.c_str());
    owner_linked_ = false;
  }
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);  // only after the name is gone: a locked name is never an orphan
    lock_fd_ = -1;
  }
}

void ShmSegment::release() noexcept {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tpf::transport
