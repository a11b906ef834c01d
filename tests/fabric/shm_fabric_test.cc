// The shared-memory layer on its own: segment lifetime, the /dev/shm space check, a one-rank
// communicator's setup and errors, and the fabric's count of ranks beyond the cores.
#include "transport/shm_fabric.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "base/available_memory.h"
#include "support/multiproc.h"
#include "support/scoped_env.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"
#include "transport/shm_segment.h"

namespace tpf {
namespace {

bool shm_entry_exists(const std::string& name) {
  return std::filesystem::exists("/dev/shm" + name);  // names start with '/'
}

std::string unique_name(const char* tag) {
  return "/tpf-test-" + std::to_string(::getpid()) + "-" + tag;
}

TEST(ShmSegment, CreateOpenUnlinkLeavesNothingBehind) {
  const std::string name = unique_name("life");
  auto created = transport::ShmSegment::create(name, 8192, "test");
  EXPECT_TRUE(shm_entry_exists(name));
  auto opened = transport::ShmSegment::open(name, 8192);
  static_cast<char*>(created.data())[100] = 42;
  EXPECT_EQ(static_cast<char*>(opened.data())[100], 42);  // same memory through both maps
  created.unlink();
  EXPECT_FALSE(shm_entry_exists(name));
  static_cast<char*>(opened.data())[101] = 7;  // the mapping outlives the name
  EXPECT_EQ(static_cast<char*>(created.data())[101], 7);
}

TEST(ShmSegment, DestroyingTheCreatorRemovesTheName) {
  const std::string name = unique_name("raii");
  { auto created = transport::ShmSegment::create(name, 4096, "test"); }
  EXPECT_FALSE(shm_entry_exists(name));
}

TEST(ShmSegment, TooSmallDevShmFailsWithTheSizeNeededAndTheFix) {
  const size_t free_bytes = transport::shm_free_bytes();
  ASSERT_GT(free_bytes, 0u) << "statvfs(/dev/shm) failed";
  const std::string name = unique_name("big");
  try {
    transport::ShmSegment::create(name, free_bytes + (size_t{1} << 30), "a 4-rank job");
    FAIL() << "creating a segment larger than /dev/shm succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource);
    const std::string message = e.what();
    EXPECT_NE(message.find("a 4-rank job needs"), std::string::npos) << message;
    EXPECT_NE(message.find("/dev/shm has only"), std::string::npos) << message;
    EXPECT_NE(message.find("--shm-size"), std::string::npos) << message;
  }
  EXPECT_FALSE(shm_entry_exists(name));
}

TEST(ShmSegment, OpeningAMissingPeerSegmentIsABootstrapError) {
  try {
    transport::ShmSegment::open(unique_name("missing"), 4096);
    FAIL() << "opened a segment that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::bootstrap);
  }
}

TEST(OneRankCommunicator, OversizedBufferIsRejectedAtCreation) {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  CommOptions options;
  options.buffer_bytes = transport::shm_free_bytes() + (size_t{1} << 30);
  try {
    Communicator::create(0, 1, "127.0.0.1:" + std::to_string(server.port()), "s3cret", options);
    FAIL() << "communicator with a buffer larger than /dev/shm was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource) << e.what();
  }
}

// A job name of its own: other tests' communicators, which ctest may run beside this one, make
// segments under the default name ("local") at any time.
TEST(OneRankCommunicator, CollectivesWorkAndLeaveNoSegment) {
  const std::string job = "onerank" + std::to_string(::getpid());
  const testing::ScopedEnv job_id("TPF_JOB_ID", job.c_str());
  TcpStoreServer server("127.0.0.1", 0, "");
  Communicator comm = Communicator::create(0, 1, "127.0.0.1:" + std::to_string(server.port()));
  float in[3] = {1.5f, -2.0f, 4.0f}, out[3] = {};
  comm.all_reduce(in, out, 3, DType::f32, ReduceOp::max);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[2], 4.0f);
  comm.all_reduce(in, in, 3, DType::f32, ReduceOp::avg);  // in place
  EXPECT_EQ(in[1], -2.0f);
  EXPECT_EQ(comm.next_sequence(), 2u);
  for (const std::string& left :
       testing::list_dev_shm("tpf-" + std::to_string(::getuid()) + "-" + job + "-")) {
    ADD_FAILURE() << "segment left after setup: /dev/shm/" << left;
  }
}

TEST(OneRankCommunicator, MalformedStoreAddressIsInvalidArgument) {
  for (const char* address : {"localhost", ":123", "host:", "host:0", "host:70000", "host:12x"}) {
    try {
      Communicator::create(0, 1, address);
      ADD_FAILURE() << "accepted store address " << address;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << address << ": " << e.what();
    }
  }
}

TEST(ShmFabricSetup, EveryRankTakesRankZerosCountOfRanksBeyondTheCores) {
  // Rank 0 sees 1 core for 3 ranks (2 beyond it); the others see 64 and alone would say 0. The
  // all-reduce choice depends on the count, so every rank must take rank 0's.
  testing::expect_all_ok(testing::run_ranks_raw(3, [](const testing::RankContext& ctx) {
    const size_t colon = ctx.store_address.rfind(':');
    transport::FabricConfig config;
    config.rank = ctx.rank;
    config.size = ctx.size;
    config.slot_bytes = 4096;
    config.p2p_chunk_bytes = 1024;
    config.segment_prefix = transport::shm_job_prefix(ctx.job_name) + "excess-";
    config.label = "excess-ranks test";
    config.store = std::make_shared<TcpStoreClient>(
        ctx.store_address.substr(0, colon),
        static_cast<uint16_t>(std::stoi(ctx.store_address.substr(colon + 1))), ctx.secret,
        std::chrono::milliseconds(20000));
    config.setup_timeout = std::chrono::milliseconds(20000);
    // 3 ranks on 1 core for rank 0, 3 ranks on 64 cores for the others (CommSettings).
    config.excess_ranks = ctx.rank == 0 ? 2 : 0;
    transport::ShmFabric fabric(config);
    TPF_CHILD_CHECK(fabric.excess_ranks() == 2, "rank " + std::to_string(ctx.rank) + " counts " +
                                                    std::to_string(fabric.excess_ranks()) +
                                                    " ranks beyond the cores");
    TPF_CHILD_CHECK(fabric.oversubscribed(), "rank " + std::to_string(ctx.rank));
  }));
}

TEST(ShmFabricMailboxes, ChunksShrinkWhereManyRanksWouldMakeTheSegmentsLarge) {
  constexpr size_t kSlot = size_t{256} << 10;  // TPF_SHM_BUFFER_BYTES' default
  using transport::ShmFabric;
  // A quarter of a slot up to 64 ranks; then 8 MiB of mailboxes a rank, at least 4 KiB a chunk.
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 2), size_t{64} << 10);
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 64), size_t{64} << 10);
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 65), 64512u);  // 8 MiB / 130, in cache lines
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 128), size_t{32} << 10);
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 512), size_t{8} << 10);
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(kSlot, 4096), size_t{4} << 10);
  // Large slots stop at 256 KiB; a small slot's quarter stays below the 4 KiB floor.
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(size_t{4} << 20, 2), size_t{256} << 10);
  EXPECT_EQ(ShmFabric::mailbox_chunk_bytes(4096, 2), 1024u);
}

TEST(ShmFabricSetup, SegmentsThatWouldNotFitInTheMachinesMemoryFailBeforeAnyIsReserved) {
  const std::optional<size_t> available = base::available_memory_bytes();
  ASSERT_TRUE(available.has_value()) << "/proc/meminfo unreadable";
  TcpStoreServer server("127.0.0.1", 0, "memory-test-secret-0123");
  const std::string job = "memory-" + std::to_string(::getpid());
  transport::FabricConfig config;
  config.rank = 0;
  config.size = 8;
  // Each segment half of what the machine has (its staging slots a quarter each): 4x in all.
  config.slot_bytes = *available / 4 / 64 * 64;
  config.p2p_chunk_bytes = 64;
  config.segment_prefix = transport::shm_job_prefix(job) + "world-";
  config.label = "communicator 'world'";
  config.store = std::make_shared<TcpStoreClient>(
      "127.0.0.1", server.port(), "memory-test-secret-0123", std::chrono::milliseconds(5000));
  try {
    transport::ShmFabric fabric(config);
    FAIL() << "8 segments of half the machine's memory were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource) << e.what();
    const std::string message = e.what();
    EXPECT_NE(message.find("communicator 'world': its 8 ranks on this machine need"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("lower TPF_SHM_BUFFER_BYTES"), std::string::npos) << message;
  }
  EXPECT_TRUE(testing::list_dev_shm(transport::shm_job_prefix(job).substr(1)).empty());
}

}  // namespace
}  // namespace tpf
