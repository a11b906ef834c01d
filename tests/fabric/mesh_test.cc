// DeviceMesh: the row-major rank layout (last dimension innermost) and the groups built by split.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "tpf/error.h"
#include "tpf/mesh.h"

namespace tpf::testing {
namespace {

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(20000);
  return o;
}

template <class F>
ErrorCode error_code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected tpf::Error";
  return ErrorCode::internal;
}

TEST(DeviceMeshLayout, RankOfAndCoordsOfRoundTrip) {
  const std::vector<std::vector<MeshDim>> meshes = {
      {{"tp", 1}}, {{"tp", 8}}, {{"dp", 2}, {"tp", 4}}, {{"pp", 3}, {"dp", 2}, {"tp", 5}},
      {{"a", 2}, {"b", 1}, {"c", 3}, {"d", 2}}};
  for (const auto& dims : meshes) {
    int total = 1;
    for (const auto& d : dims) total *= d.size;
    for (int r = 0; r < total; ++r) {
      const auto c = DeviceMesh::coords_of(dims, r);
      ASSERT_EQ(c.size(), dims.size());
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_GE(c[i], 0);
        EXPECT_LT(c[i], dims[i].size);
      }
      EXPECT_EQ(DeviceMesh::rank_of(dims, c), r);
    }
  }
}

TEST(DeviceMeshLayout, LastDimensionIsInnermost) {
  const std::vector<MeshDim> dims = {{"dp", 2}, {"tp", 4}};
  EXPECT_EQ(DeviceMesh::coords_of(dims, 5), (std::vector<int>{1, 1}));
  EXPECT_EQ(DeviceMesh::rank_of(dims, {0, 3}), 3);
  EXPECT_EQ(DeviceMesh::rank_of(dims, {1, 0}), 4);
}

TEST(DeviceMeshLayout, BadCoordinatesAndRanksAreInvalidArguments) {
  const std::vector<MeshDim> dims = {{"dp", 2}, {"tp", 4}};
  EXPECT_EQ(error_code_of([&] { DeviceMesh::rank_of(dims, {0}); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code_of([&] { DeviceMesh::rank_of(dims, {2, 0}); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code_of([&] { DeviceMesh::rank_of(dims, {0, -1}); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code_of([&] { DeviceMesh::coords_of(dims, 8); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code_of([&] { DeviceMesh::coords_of(dims, -1); }), ErrorCode::invalid_argument);
  EXPECT_EQ(error_code_of([&] { DeviceMesh::coords_of({{"x", 0}}, 0); }), ErrorCode::invalid_argument);
}

// Checks the group along one dimension: its size, this rank's place in it, and an all_reduce of
// world ranks that must sum the world ranks of exactly the expected members.
void check_group(DeviceMesh& mesh, const std::string& dim, const std::vector<int>& members,
                 int world_rank) {
  Communicator& g = mesh.group(dim);
  TPF_CHILD_CHECK(g.valid(), dim + " group is invalid");
  TPF_CHILD_CHECK(g.size() == static_cast<int>(members.size()),
                  dim + " group has size " + std::to_string(g.size()));
  TPF_CHILD_CHECK(g.rank() == mesh.coord(dim), dim + " group rank " + std::to_string(g.rank()) +
                                                   " differs from the coordinate " +
                                                   std::to_string(mesh.coord(dim)));
  TPF_CHILD_CHECK(members[static_cast<size_t>(g.rank())] == world_rank,
                  dim + ": group rank " + std::to_string(g.rank()) + " should be world rank " +
                      std::to_string(members[static_cast<size_t>(g.rank())]));
  int32_t mine = world_rank, sum = -1;
  g.all_reduce(&mine, &sum, 1, DType::i32, ReduceOp::sum);
  const int want = std::accumulate(members.begin(), members.end(), 0);
  TPF_CHILD_CHECK(sum == want, dim + " all_reduce of world ranks gave " + std::to_string(sum) +
                                   ", want " + std::to_string(want));
}

TEST(DeviceMeshGroups, DpByTpOverEightRanks) {
  expect_all_ok(run_ranks(8, [](Communicator& world) {
    const int r = world.rank();
    DeviceMesh mesh(world, {{"dp", 2}, {"tp", 4}});
    TPF_CHILD_CHECK(mesh.coords() == (std::vector<int>{r / 4, r % 4}), "coords");
    // TP innermost: contiguous ranks {0..3}, {4..7}; DP strided: {0,4}, {1,5}, ...
    const int tp0 = r / 4 * 4;
    check_group(mesh, "tp", {tp0, tp0 + 1, tp0 + 2, tp0 + 3}, r);
    check_group(mesh, "dp", {r % 4, r % 4 + 4}, r);
    TPF_CHILD_CHECK(&mesh.group(size_t{1}) == &mesh.group("tp"), "group(1) is not tp");
  }, run_options()));
}

TEST(DeviceMeshGroups, ThreeDimensionsTwoByTwoByTwo) {
  expect_all_ok(run_ranks(8, [](Communicator& world) {
    const int r = world.rank();
    DeviceMesh mesh(world, {{"pp", 2}, {"dp", 2}, {"tp", 2}});
    const int pp = r / 4, dp = (r / 2) % 2, tp = r % 2;
    TPF_CHILD_CHECK(mesh.coords() == (std::vector<int>{pp, dp, tp}), "coords");
    auto at = [](int p, int d, int t) { return p * 4 + d * 2 + t; };
    check_group(mesh, "tp", {at(pp, dp, 0), at(pp, dp, 1)}, r);
    check_group(mesh, "dp", {at(pp, 0, tp), at(pp, 1, tp)}, r);
    check_group(mesh, "pp", {at(0, dp, tp), at(1, dp, tp)}, r);
  }, run_options()));
}

TEST(DeviceMeshGroups, InvalidMeshesAreRejectedOnEveryRank) {
  expect_all_ok(run_ranks(2, [](Communicator& world) {
    auto rejected = [&](std::vector<MeshDim> dims, const std::string& what) {
      try {
        DeviceMesh mesh(world, std::move(dims));
      } catch (const Error& e) {
        TPF_CHILD_CHECK(e.code() == ErrorCode::invalid_argument, what + ": wrong code: " + e.what());
        return;
      }
      TPF_CHILD_CHECK(false, what + ": accepted");
    };
    rejected({{"dp", 3}}, "product 3 != world 2");
    rejected({{"dp", 2}, {"tp", 2}}, "product 4 != world 2");
    rejected({{"dp", 2}, {"dp", 1}}, "duplicate name");
    rejected({{"", 2}}, "empty name");
    rejected({{"dp", 0}, {"tp", 2}}, "size 0");
    rejected({{"dp", -2}, {"tp", -1}}, "negative sizes");
    rejected({}, "no dimensions");
    // The world still works: validation happens before any collective.
    DeviceMesh mesh(world, {{"dp", 1}, {"tp", 2}});
    check_group(mesh, "tp", {0, 1}, world.rank());
    bool threw = false;
    try {
      mesh.group("nope");
    } catch (const Error& e) {
      threw = e.code() == ErrorCode::invalid_argument;
    }
    TPF_CHILD_CHECK(threw, "group(\"nope\") did not throw invalid_argument");
  }, run_options()));
}

}  // namespace
}  // namespace tpf::testing
