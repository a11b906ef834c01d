// The n source pointers of a reduction: on the stack for the usual rank counts, so the
// small-message paths do not allocate.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace tpf::coll {

class SourceList {
 public:
  explicit SourceList(int n) {
    if (n > static_cast<int>(kInline)) heap_.resize(static_cast<size_t>(n));
    data_ = heap_.empty() ? inline_.data() : heap_.data();
  }
  const void*& operator[](int i) { return data_[i]; }
  const void* const* data() const { return data_; }

 private:
  static constexpr size_t kInline = 64;
  std::array<const void*, kInline> inline_{};
  std::vector<const void*> heap_;
  const void** data_;
};

}  // namespace tpf::coll
