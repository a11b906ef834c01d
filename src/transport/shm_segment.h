// A POSIX shared-memory segment mapped into this process. The creator reserves its pages up front
// (so a too-small /dev/shm fails here, with a message, instead of SIGBUS later) and unlinks the
// name as soon as every peer has mapped it, so nothing is left in /dev/shm even after SIGKILL.
//
// A creator killed before that leaves the name behind. To let others recognise such orphans, the
// creator holds a shared flock() on the segment for as long as its name exists: the kernel drops
// it when the process dies, so a segment nobody holds a lock on has lost its creator
// (remove_orphan_segments). Only names ending in kOrphanSuffix take part, so segments of other
// programs (or of older versions, without the lock) are never touched.
#pragma once

#include <cstddef>
#include <string>

namespace tpf::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates (O_EXCL, mode 0600) and maps `bytes`; `what` describes the job for error messages.
  // Holds the creator's lock until unlink() when the name ends in kOrphanSuffix.
  static ShmSegment create(const std::string& name, size_t bytes, const std::string& what);
  // Maps an existing segment created by a peer, without page tables (populate what is read).
  static ShmSegment open(const std::string& name, size_t bytes);
  // Builds the page tables of [offset, offset + bytes) now (whole pages around it): page faults
  // are slow, badly so on VMs, and belong to setup, not to the first collectives.
  void populate(size_t offset, size_t bytes) const;

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Removes the name (and drops the creator's lock); the mapping stays valid. Idempotent.
  void unlink();

  // Ends the names of segments whose creator holds the orphan lock.
  static constexpr const char* kOrphanSuffix = "-lk";

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

 private:
  void release() noexcept;
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_linked_ = false;  // we created it and have not unlinked it yet
  int lock_fd_ = -1;           // the creator's descriptor holding the orphan lock, while linked
};

// Removes the segments of this user whose names start with `prefix` (with its leading '/', e.g.
// shm_job_prefix()), end in ShmSegment::kOrphanSuffix, and whose creator is gone (holds no lock).
// Segments whose creator is alive are left alone, whatever their name. Returns how many it removed;
// *held (if given) is set to how many such names it left because their lock is held.
size_t remove_orphan_segments(const std::string& prefix, size_t* held = nullptr);

// Removes a segment's name if it still exists (a peer's, once every rank has mapped it).
void unlink_segment_name(const std::string& name) noexcept;

// Prefix of every segment of this user: "/tpf-<uid>-".
std::string shm_user_prefix();

// Segment name prefix of a job: "/tpf-<uid>-<job_id>-". `tpf run` removes leftovers with it.
std::string shm_job_prefix(const std::string& job_id);

// Bytes free in /dev/shm (statvfs), or 0 if unknown.
size_t shm_free_bytes();

// Bytes of this user's segments whose names start with `prefix` (with its leading '/'), as
// created so far.
size_t segments_bytes(const std::string& prefix);

}  // namespace tpf::transport
