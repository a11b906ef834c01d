// transport::FailureBoard: a communicator's first failure in its store, for the ranks a failure
// notice cannot reach. Here over stores in this process: one that keeps keys in memory, one
// that refuses every call, and one whose calls wait until the test lets them through (a store
// that does not answer). Across processes and hosts: AcrossHostsFailures.
// ASendBufferThatIsNotReadableIsNamedAsTheSendersNotAsALostPeer.

#include "transport/failure_board.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/memory_store.h"
#include "tpf/error.h"

namespace tpf::transport {
namespace {

using namespace std::chrono_literals;
using testing::GoneStore;
using testing::MemoryStore;

// What `board` reads within 30 s (the reader looks every 5 ms), or nothing.
std::optional<FailureRecord> read_within_bound(FailureBoard& board) {
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  std::optional<FailureRecord> record;
  while (!(record = board.published()) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  return record;
}

TEST(FailureBoard, ARecordGoesThroughTheStoreAsItWasWritten) {
  const FailureRecord record{ErrorCode::invalid_argument,
                             "rank 0: the send buffer\nof a transfer to rank 1 is not readable"};
  const std::optional<FailureRecord> back = decode_failure_record(encode_failure_record(record));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->code, record.code);
  EXPECT_EQ(back->message, record.message);
  EXPECT_EQ(back->lost_process, 0u);
  for (const char* bad :
       {"", "3", "\nmessage", "x\nmessage", "99\nmessage", "1234\nmessage", "3 \nmessage",
        "3 0\nmessage", "3 x\nmessage", "3 12 4\nmessage", "3  12\nmessage", "3 -12\nmessage"}) {
    EXPECT_FALSE(decode_failure_record(bad).has_value()) << "'" << bad << "'";
  }
}

// The process a failure found lost travels with the record, whatever its token (they are random
// 64-bit numbers).
TEST(FailureBoard, ARecordKeepsTheProcessItFoundLost) {
  for (const uint64_t token : {uint64_t{1}, uint64_t{0x9e3779b97f4a7c15}, UINT64_MAX}) {
    const FailureRecord record{ErrorCode::timeout, "rank 3 has sent no heartbeat", token};
    const std::optional<FailureRecord> back = decode_failure_record(encode_failure_record(record));
    ASSERT_TRUE(back.has_value()) << token;
    EXPECT_EQ(back->code, record.code);
    EXPECT_EQ(back->message, record.message);
    EXPECT_EQ(back->lost_process, token);
  }
}

TEST(FailureBoard, TheFirstRankToPublishIsTheOneEveryRankReads) {
  auto store = std::make_shared<MemoryStore>();
  FailureBoard first(store), second(store), reader(store);
  EXPECT_FALSE(reader.published().has_value());  // nothing published yet (the reader starts)
  first.publish({ErrorCode::invalid_argument, "rank 0: its send buffer"});
  ASSERT_TRUE(first.await_published(30s));
  second.publish({ErrorCode::peer_died, "rank 1: lost rank 0"});
  ASSERT_TRUE(second.await_published(30s));
  for (FailureBoard* board : {&reader, &second, &first}) {
    const std::optional<FailureRecord> read = read_within_bound(*board);
    ASSERT_TRUE(read.has_value());
    EXPECT_EQ(read->code, ErrorCode::invalid_argument);
    EXPECT_EQ(read->message, "rank 0: its send buffer");
  }
  // Only a board's first record is published.
  first.publish({ErrorCode::timeout, "later"});
  EXPECT_TRUE(first.await_published(30s));
  EXPECT_EQ(read_within_bound(reader)->message, "rank 0: its send buffer");
}

TEST(FailureBoard, AStoreThatDoesNotAnswerHoldsNobodyUp) {
  auto store = std::make_shared<MemoryStore>(/*gated=*/true);
  std::optional<FailureBoard> board(std::in_place, store);
  board->publish({ErrorCode::timeout, "rank 2 timed out"});  // returns with the store closed
  EXPECT_FALSE(board->await_published(10ms));
  EXPECT_FALSE(board->published().has_value());  // nor does reading wait
  store->open();
  EXPECT_TRUE(board->await_published(30s));
  ASSERT_TRUE(read_within_bound(*board).has_value());
  board.reset();  // the threads hold the store, not the board
}

TEST(FailureBoard, AStoreThatFailsOrNoStoreLeavesNothingToRead) {
  FailureBoard gone(std::make_shared<GoneStore>());
  gone.publish({ErrorCode::timeout, "rank 2 timed out"});
  EXPECT_TRUE(gone.await_published(30s));  // tried and failed: nothing left to wait for
  EXPECT_FALSE(gone.published().has_value());
  FailureBoard none(nullptr);
  none.publish({ErrorCode::timeout, "rank 2 timed out"});
  EXPECT_TRUE(none.await_published(0ms));
  EXPECT_FALSE(none.published().has_value());
}

}  // namespace
}  // namespace tpf::transport
