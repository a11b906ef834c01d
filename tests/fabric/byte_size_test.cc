// Human-readable byte counts: the rounding unit choice and the exact form.
#include "base/byte_size.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace tpf::base {
namespace {

TEST(ByteSize, PicksTheLargestUnitReached) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(64.0 * (1 << 20)), "64.0 MiB");
  EXPECT_EQ(format_bytes(1.25 * (1 << 30), 2), "1.25 GiB");
  EXPECT_EQ(format_bytes(3.0 * (1ull << 40)), "3.0 TiB");
  EXPECT_EQ(format_bytes(5000.0 * (1ull << 40)), "5000.0 TiB");  // no unit above TiB
  EXPECT_EQ(format_bytes(1536, 0), "2 KiB");
}

TEST(ByteSize, ExactFormKeepsTheValue) {
  EXPECT_EQ(format_exact_bytes(0), "0 B");
  EXPECT_EQ(format_exact_bytes(1000), "1000 B");
  EXPECT_EQ(format_exact_bytes(3 * 1024), "3 KiB");
  EXPECT_EQ(format_exact_bytes(1536), "1536 B");  // not a whole KiB
  EXPECT_EQ(format_exact_bytes(size_t{32} << 20), "32 MiB");
  EXPECT_EQ(format_exact_bytes((size_t{1} << 30) + 1024), "1048577 KiB");
  EXPECT_EQ(format_exact_bytes(size_t{2} << 40), "2 TiB");
}

}  // namespace
}  // namespace tpf::base
