// The collective vocabulary (coll/collective_kinds.h): every spelling the commands accepted before
// it existed still parses, the call-level kinds agree with their rows, and the bus-bandwidth factor
// is nccl-tests' at every rank count, including the one where the two old tables disagreed.
#include "coll/collective_kinds.h"

#include <gtest/gtest.h>

#include <string>

#include "coll/alpha_beta.h"
#include "coll/op_desc.h"
#include "tpf/error.h"

namespace tpf::coll {
namespace {

TEST(CollectiveKinds, EverySpellingAcceptedBeforeStillParses) {
  // tpf bench's names and their nccl-tests forms without underscores; tpf plan's send_recv.
  const std::pair<const char*, Collective> spellings[] = {
      {"all_reduce", Collective::all_reduce},
      {"allreduce", Collective::all_reduce},
      {"all_gather", Collective::all_gather},
      {"allgather", Collective::all_gather},
      {"reduce_scatter", Collective::reduce_scatter},
      {"reducescatter", Collective::reduce_scatter},
      {"broadcast", Collective::broadcast},
      {"reduce", Collective::reduce},
      {"all_to_all", Collective::all_to_all},
      {"alltoall", Collective::all_to_all},
      {"gather", Collective::gather},
      {"scatter", Collective::scatter},
      {"sendrecv", Collective::send_recv},
      {"send_recv", Collective::send_recv},
      {"barrier", Collective::barrier},
  };
  for (const auto& [spelling, id] : spellings) {
    EXPECT_EQ(parse_collective(spelling), id) << spelling;
  }
  for (const char* wrong : {"", "all", "all__reduce", "All_Reduce", "sendrecvs", "ring"}) {
    EXPECT_FALSE(parse_collective(wrong)) << wrong;
  }
  for (const CollectiveInfo& info : all_collectives()) {
    EXPECT_EQ(parse_collective(info.name), info.id) << info.name;
    EXPECT_NE(collective_choices().find(info.name), std::string::npos) << info.name;
  }
}

TEST(CollectiveKinds, CallKindsTakeRootsAndReductionsFromTheirRow) {
  EXPECT_TRUE(is_reducing(OpKind::reduce_scatter));
  EXPECT_FALSE(is_reducing(OpKind::all_gather));
  EXPECT_TRUE(is_rooted(OpKind::scatter));
  EXPECT_FALSE(is_rooted(OpKind::all_to_all));
  EXPECT_FALSE(is_rooted(OpKind::send));
  EXPECT_STREQ(op_kind_name(OpKind::send), "send");
  EXPECT_STREQ(op_kind_name(OpKind::recv), "recv");
  EXPECT_STREQ(op_kind_name(OpKind::all_to_all), "all_to_all");
  EXPECT_EQ(collective_of(OpKind::recv), Collective::send_recv);
}

TEST(CollectiveKinds, BusFactorIsNcclTestsAtEveryRankCount) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::scatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::broadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::send_recv, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::barrier, 4), 0.0);
  // One rank: nothing crosses a link. The planner's table said 1 here, tpf bench's 0.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_to_all, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 0), 0.0);
}

TEST(CollectiveKinds, ThePlannerRefusesWhatItCannotPriceNamingWhatItCan) {
  EXPECT_EQ(parse_collective_op("sendrecv"), Collective::send_recv);
  EXPECT_EQ(parse_collective_op("allreduce"), Collective::all_reduce);
  try {
    parse_collective_op("gather");
    FAIL() << "gather was priced";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("all_to_all or send_recv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpf::coll
