// Whether a range of this process's memory is readable: mapped pages, a protected page inside or
// at either end of a range, an unmapped range, ranges that cross the batch of pages one call asks.
#include "base/memory_probe.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>

namespace tpf::base {
namespace {

class MemoryProbe : public ::testing::Test {
 protected:
  static constexpr size_t kPages = 2100;  // more than the 1024 pages one process_vm_readv reads
  void SetUp() override {
    page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* mapped =
        ::mmap(nullptr, kPages * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mapped, MAP_FAILED);
    base_ = static_cast<std::byte*>(mapped);
  }
  void TearDown() override { ::munmap(base_, kPages * page_); }
  void protect(size_t page) { ASSERT_EQ(::mprotect(base_ + page * page_, page_, PROT_NONE), 0); }
  std::byte* at(size_t page, size_t offset = 0) const { return base_ + page * page_ + offset; }

  size_t page_ = 0;
  std::byte* base_ = nullptr;
};

TEST_F(MemoryProbe, MappedMemoryIsReadable) {
  EXPECT_EQ(memory_readable(at(0), kPages * page_), true);
  EXPECT_EQ(memory_readable(at(3, 17), 5), true);         // inside one page
  EXPECT_EQ(memory_readable(at(3, page_ - 1), 2), true);  // across a boundary
  EXPECT_EQ(memory_readable(nullptr, 0), true);           // nothing to read
}

TEST_F(MemoryProbe, AProtectedPageAnywhereInTheRangeMakesItUnreadable) {
  protect(1500);  // in the second batch of pages
  EXPECT_EQ(memory_readable(at(0), kPages * page_), false);
  EXPECT_EQ(memory_readable(at(1499, page_ - 1), 2),
            false);  // its first byte, from the page before
  EXPECT_EQ(memory_readable(at(1500, page_ - 1), 1), false);  // its last byte alone
  EXPECT_EQ(memory_readable(at(1501), page_), true);          // the page after
  EXPECT_EQ(memory_readable(at(0), 1500 * page_), true);      // everything before it
  protect(0);
  EXPECT_EQ(memory_readable(at(0), 1), false);  // the first page of the range
}

TEST_F(MemoryProbe, UnmappedMemoryIsUnreadable) {
  ASSERT_EQ(::munmap(at(kPages - 10), 10 * page_), 0);
  EXPECT_EQ(memory_readable(at(kPages - 20), 20 * page_), false);
  EXPECT_EQ(memory_readable(at(kPages - 20), 10 * page_), true);
}

}  // namespace
}  // namespace tpf::base
