// all_gather and broadcast of outputs far larger than a staging slot (many pieces, the last one
// partial), with misaligned buffers, odd lengths and in place, checked byte for byte.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "tpf/comm.h"

namespace tpf::testing {
namespace {

constexpr size_t kOutputBytes = size_t{32} << 20;  // 128 slots of the default 256 KiB

uint8_t pattern(int rank, size_t i) { return static_cast<uint8_t>(i * 131 + i / 251 + rank * 17); }

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(60000);
  return o;
}

// The first index where buf differs from what rank's block should hold, or -1.
long first_wrong(const uint8_t* buf, size_t len, int rank) {
  for (size_t i = 0; i < len; ++i)
    if (buf[i] != pattern(rank, i)) return static_cast<long>(i);
  return -1;
}

void check_block(const uint8_t* buf, size_t len, int rank, const std::string& what) {
  const long at = first_wrong(buf, len, rank);
  TPF_CHILD_CHECK(at < 0, what + ": block of rank " + std::to_string(rank) + " wrong at byte " +
                              std::to_string(at));
}

class LargeOutputTest : public ::testing::TestWithParam<int> {};

TEST_P(LargeOutputTest, AllGatherOutOfPlaceMisalignedAndInPlace) {
  expect_all_ok(run_ranks(
      GetParam(),
      [](Communicator& comm) {
        const int n = comm.size(), me = comm.rank();
        const size_t block = kOutputBytes / static_cast<size_t>(n) + 4099;
        std::vector<uint8_t> send(block + 1), recv(block * static_cast<size_t>(n) + 3);
        uint8_t* in = send.data() + 1;  // neither buffer 16-byte aligned
        uint8_t* out = recv.data() + 3;
        for (size_t i = 0; i < block; ++i) in[i] = pattern(me, i);
        comm.all_gather(in, out, block, DType::u8);
        for (int p = 0; p < n; ++p) check_block(out + p * block, block, p, "out of place");

        std::vector<uint8_t> inplace(block * static_cast<size_t>(n));
        for (size_t i = 0; i < block; ++i) inplace[me * block + i] = pattern(me, i);
        comm.all_gather(inplace.data() + me * block, inplace.data(), block, DType::u8);
        for (int p = 0; p < n; ++p) check_block(inplace.data() + p * block, block, p, "in place");
      },
      run_options()));
}

TEST_P(LargeOutputTest, BroadcastMisalignedFromTheLastRank) {
  expect_all_ok(run_ranks(
      GetParam(),
      [](Communicator& comm) {
        const int root = comm.size() - 1;
        const size_t len = kOutputBytes + 77;
        std::vector<uint8_t> send(len + 5), recv(len + 7);
        for (size_t i = 0; i < len; ++i) send[5 + i] = pattern(root, i);
        comm.broadcast(send.data() + 5, recv.data() + 7, len, DType::u8, root);
        check_block(recv.data() + 7, len, root, "broadcast");
      },
      run_options()));
}

std::string n_name(const ::testing::TestParamInfo<int>& info) {
  std::string name = "N";  // (not "N" + ...: GCC 12 warns -Wrestrict on that here, wrongly)
  return name + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LargeOutputTest, ::testing::Values(2, 3), n_name);

}  // namespace
}  // namespace tpf::testing
