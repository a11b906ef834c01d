// comm/name_generations: which generation of a communicator's name a joining rank belongs to,
// over a store in this process. Across processes: SetupFault.
// ACreationThatFailedCanBeTriedAgainUnderItsName and Shrink.AShrinkThatTimedOutCanBeCalledAgain.

#include "comm/name_generations.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/memory_store.h"

namespace tpf::detail {
namespace {

using testing::GoneStore;
using testing::MemoryStore;

std::vector<uint64_t> take(Store& store, int joiners, int size) {
  std::vector<uint64_t> generations;
  for (int i = 0; i < joiners; ++i) generations.push_back(take_generation(store, "c", size));
  return generations;
}

// Each group of `size` joiners is the next generation: a name is used again.
TEST(NameGenerations, EachGroupOfSizeJoinersIsTheNextGeneration) {
  MemoryStore store;
  EXPECT_EQ(take(store, 6, 3), (std::vector<uint64_t>{0, 0, 0, 1, 1, 1}));
  MemoryStore one;
  EXPECT_EQ(take(one, 3, 1), (std::vector<uint64_t>{0, 1, 2}));
}

// Two of three joined generation 0 and it failed; the three who try again meet in generation 1,
// and the name's generations go on from there.
TEST(NameGenerations, ThoseWhoTryAgainAfterAFailedCreationMeetInTheNext) {
  MemoryStore store;
  EXPECT_EQ(take(store, 2, 3), (std::vector<uint64_t>{0, 0}));
  abandon_generation(store, "c", 0);
  EXPECT_EQ(take(store, 3, 3), (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(take(store, 3, 3), (std::vector<uint64_t>{2, 2, 2}));
  // Another name keeps its own count.
  EXPECT_EQ(take_generation(store, "d", 3), 0u);
}

// A late joiner of the failed creation, arriving after it was abandoned, goes with those who try
// again, whatever their order; so do those of two failures in a row.
TEST(NameGenerations, ALateJoinerOfAnAbandonedGenerationGoesWithTheRetry) {
  MemoryStore store;
  EXPECT_EQ(take(store, 1, 3), (std::vector<uint64_t>{0}));
  abandon_generation(store, "c", 0);
  EXPECT_EQ(take(store, 2, 3), (std::vector<uint64_t>{1, 1}));  // the late one, a retry
  abandon_generation(store, "c", 1);                            // failed again, short of one
  EXPECT_EQ(take(store, 3, 3), (std::vector<uint64_t>{2, 2, 2}));
}

// Abandoning is best effort: a store that is gone leaves it undone, without throwing.
TEST(NameGenerations, AbandoningOverAStoreThatIsGoneDoesNotThrow) {
  GoneStore gone;
  EXPECT_NO_THROW(abandon_generation(gone, "c", 0));
}

}  // namespace
}  // namespace tpf::detail
