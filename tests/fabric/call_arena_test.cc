// The per-call arena (base/call_arena.h): small containers live inside it, larger ones on the
// heap, and both keep their contents as they grow.
#include "base/call_arena.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

namespace tpf::base {
namespace {

bool inside(const void* p, const void* object, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto begin = reinterpret_cast<uintptr_t>(object);
  return at >= begin && at < begin + bytes;
}

TEST(CallArena, SmallContainersLiveInsideItAndLargerOnesOnTheHeap) {
  CallArena<256> arena;
  std::pmr::vector<uint64_t> small(&arena);
  small.reserve(8);  // 64 bytes
  EXPECT_TRUE(inside(small.data(), &arena, sizeof arena));
  std::pmr::vector<uint64_t> grown(&arena);
  for (uint64_t i = 0; i < 1000; ++i) grown.push_back(i * 7);  // outgrows the 256 bytes
  EXPECT_FALSE(inside(grown.data(), &arena, sizeof arena));
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(grown[i], i * 7) << i;
  // The inline memory is never handed out twice: the small vector's contents stay.
  for (uint64_t i = 0; i < 8; ++i) small.push_back(i + 1);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(small[i], i + 1);
}

TEST(CallArena, EveryAllocationHasTheAlignmentAskedFor) {
  CallArena<512> arena;
  std::pmr::memory_resource& resource = arena;
  for (size_t alignment : {size_t{1}, size_t{2}, size_t{8}, size_t{16}, size_t{64}}) {
    void* p = resource.allocate(3, alignment);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignment, 0u) << alignment;
    // Beyond the buffer's own alignment it comes from the heap.
    if (alignment > alignof(std::max_align_t)) {
      EXPECT_FALSE(inside(p, &arena, sizeof arena));
    }
    resource.deallocate(p, 3, alignment);
  }
}

}  // namespace
}  // namespace tpf::base
