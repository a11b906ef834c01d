// A POSIX shared-memory segment mapped into this process. The creator reserves its pages up front
// (so a too-small /dev/shm fails here, with a message, instead of SIGBUS later) and unlinks the
// name as soon as every peer has mapped it, so nothing is left in /dev/shm even after SIGKILL.
#pragma once

#include <cstddef>
#include <string>

namespace tpf::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates (O_EXCL, mode 0600) and maps `bytes`; `what` describes the job for error messages.
  static ShmSegment create(const std::string& name, size_t bytes, const std::string& what);
  // Maps an existing segment created by a peer.
  static ShmSegment open(const std::string& name, size_t bytes);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Removes the name; the mapping stays valid. Idempotent.
  void unlink();

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

 private:
  void release() noexcept;
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_linked_ = false;  // we created it and have not unlinked it yet
};

// Segment name prefix of a job: "/tpf-<uid>-<job_id>-". `tpf run` removes leftovers with it.
std::string shm_job_prefix(const std::string& job_id);

// Bytes free in /dev/shm (statvfs), or 0 if unknown.
size_t shm_free_bytes();

}  // namespace tpf::transport
