// The C API: status codes, per-thread messages, and arguments only C callers can get wrong.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "tpf/store.h"
#include "tpf/tpf_c.h"

namespace {

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string address = "127.0.0.1:" + std::to_string(server_.port());
    ASSERT_EQ(tpf_comm_create(0, 1, address.c_str(), "k", &comm_), TPF_OK) << tpf_last_error();
  }
  void TearDown() override { EXPECT_EQ(tpf_comm_destroy(comm_), TPF_OK); }
  tpf::TcpStoreServer server_{"127.0.0.1", 0, "k"};
  tpf_comm_t comm_ = nullptr;
};

TEST_F(CApi, CollectivesReturnOkAndCorrectData) {
  int rank = -1, size = -1;
  EXPECT_EQ(tpf_comm_rank(comm_, &rank), TPF_OK);
  EXPECT_EQ(tpf_comm_size(comm_, &size), TPF_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  int job_rank = -1;
  EXPECT_EQ(tpf_comm_job_rank(comm_, 0, &job_rank), TPF_OK) << tpf_last_error();
  EXPECT_EQ(job_rank, 0);
  int32_t in[4] = {1, -2, 3, -4}, out[4] = {};
  ASSERT_EQ(tpf_all_reduce(comm_, in, out, 4, TPF_I32, TPF_SUM), TPF_OK) << tpf_last_error();
  EXPECT_EQ(out[3], -4);
  EXPECT_EQ(tpf_barrier(comm_), TPF_OK);
}

TEST_F(CApi, NegativeCountIsInvalidArgumentWithAMessage) {
  float x = 0;
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, -1, TPF_F32, TPF_SUM), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("count -1 is negative"), std::string::npos)
      << tpf_last_error();
}

TEST_F(CApi, UnknownDtypeAndOpAndNullsAreInvalidArguments) {
  float x = 0;
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, 1, 42, TPF_SUM), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("unknown dtype"), std::string::npos);
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, 1, TPF_F32, -3), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("unknown reduction op"), std::string::npos);
  EXPECT_EQ(tpf_all_reduce(comm_, nullptr, &x, 1, TPF_F32, TPF_SUM), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_broadcast(comm_, &x, &x, 1, TPF_F32, 1), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_all_reduce(nullptr, &x, &x, 1, TPF_F32, TPF_SUM), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_comm_rank(comm_, nullptr), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_comm_job_rank(comm_, 0, nullptr), TPF_ERR_INVALID_ARGUMENT);
  int job_rank = -1;
  EXPECT_EQ(tpf_comm_job_rank(comm_, 1, &job_rank), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("no such rank"), std::string::npos)
      << tpf_last_error();
  EXPECT_EQ(tpf_comm_set_timeout_ms(comm_, -5), TPF_ERR_INVALID_ARGUMENT);
  // Invalid arguments do not break the communicator.
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, 1, TPF_F32, TPF_SUM), TPF_OK) << tpf_last_error();
}

TEST_F(CApi, AllToAllVCopiesTheOwnBlockAndRefusesNegativeOrNullCounts) {
  const int32_t in[4] = {7, 8, 9, 10};
  int32_t out[5] = {0, 0, 0, 0, 0};
  const int64_t send_count[1] = {3}, send_displ[1] = {1}, recv_count[1] = {3}, recv_displ[1] = {2};
  ASSERT_EQ(tpf_all_to_allv(comm_, in, send_count, send_displ, out, recv_count, recv_displ,
                            TPF_I32),
            TPF_OK)
      << tpf_last_error();
  EXPECT_EQ(out[1], 0);
  EXPECT_EQ(out[2], 8);
  EXPECT_EQ(out[4], 10);
  const int64_t negative[1] = {-2};
  EXPECT_EQ(tpf_all_to_allv(comm_, in, send_count, send_displ, out, negative, recv_displ, TPF_I32),
            TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("recv_counts[0] = -2 is negative"),
            std::string::npos)
      << tpf_last_error();
  EXPECT_EQ(tpf_all_to_allv(comm_, in, send_count, nullptr, out, recv_count, recv_displ, TPF_I32),
            TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("send_displs is NULL"), std::string::npos)
      << tpf_last_error();
  // The counts of the one rank disagree with themselves: a mismatch.
  const int64_t two[1] = {2};
  EXPECT_EQ(tpf_all_to_allv(comm_, in, send_count, send_displ, out, two, recv_displ, TPF_I32),
            TPF_ERR_MISMATCH);
}

TEST_F(CApi, LastErrorIsPerThread) {
  float x = 0;
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, -7, TPF_F32, TPF_SUM), TPF_ERR_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] { other = tpf_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(tpf_last_error()).find("-7"), std::string::npos);
}

TEST_F(CApi, AbortMakesLaterCallsFailFast) {
  EXPECT_EQ(tpf_comm_abort(comm_), TPF_OK);
  float x = 0;
  EXPECT_EQ(tpf_all_reduce(comm_, &x, &x, 1, TPF_F32, TPF_SUM), TPF_ERR_ABORTED);
}

TEST_F(CApi, ShrinkWithNoRankDeadIsInvalidArgument) {
  tpf_comm_t live = nullptr;
  EXPECT_EQ(tpf_comm_shrink(comm_, &live), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tpf_last_error()).find("nothing to leave out"), std::string::npos)
      << tpf_last_error();
  EXPECT_EQ(live, nullptr);
  EXPECT_EQ(tpf_comm_shrink(comm_, nullptr), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_comm_shrink(nullptr, &live), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tpf_barrier(comm_), TPF_OK);
}

TEST(CApiCreate, BadStoreAddressIsInvalidArgument) {
  tpf_comm_t comm = nullptr;
  EXPECT_EQ(tpf_comm_create(0, 1, "nonsense", "", &comm), TPF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(tpf_comm_create(0, 1, nullptr, "", &comm), TPF_ERR_INVALID_ARGUMENT);
}

}  // namespace
