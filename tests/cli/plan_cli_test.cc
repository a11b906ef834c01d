// `tpf plan` as a user runs it: one layout as a table and as JSON, a search with its chart, the
// collective view with routing effects, cluster files, and bad input named clearly.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/json.h"
#include "support/run_tpf.h"
#include "support/scratch_dir.h"

namespace tpf::testing {
namespace {

using namespace std::chrono_literals;

size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST(PlanCommand, OneLayoutAsTableAndJsonAgree) {
  const std::vector<std::string> args = {"plan",
                                         "--cluster",
                                         "dgx-h100",
                                         "--model",
                                         "gpt-175b",
                                         "--layout",
                                         "tp=8,pp=8,dp=16,sp=1,recompute=selective"};
  const Outcome table = run_tpf(args, {}, {}, 30s);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* part : {"step time", "tokens/s", "MFU", "memory per GPU", "compute", "TP comm",
                           "PP bubble", "exposed DP comm", "1024 GPUs"}) {
    EXPECT_TRUE(contains(table.out, part)) << part << "\n" << table.out;
  }
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const Outcome as_json = run_tpf(json_args, {}, {}, 30s);
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  const json::Value v = json::parse(as_json.out, "tpf plan --json");
  const json::Value& estimate = v.at("estimate");
  const json::Value& b = estimate.at("breakdown");
  const double sum = b.at("compute_s").as_double() + b.at("tp_comm_s").as_double() +
                     b.at("pp_comm_s").as_double() + b.at("pp_bubble_s").as_double() +
                     b.at("dp_exposed_s").as_double() + b.at("optimizer_s").as_double();
  EXPECT_NEAR(sum, estimate.at("step_s").as_double(), 1e-9 * sum);
  EXPECT_EQ(v.at("cluster").at("gpus").as_int(), 1024);
  char step[32];
  std::snprintf(step, sizeof step, "%.3f s", estimate.at("step_s").as_double());
  EXPECT_TRUE(contains(table.out, step)) << step;
}

TEST(PlanCommand, SearchRanksLayoutsExplainsTheWinnerAndDrawsTheRanking) {
  ScratchDir dir;
  const std::string svg = dir / "ranking.svg";
  const Outcome out = run_tpf({"plan", "--cluster", "dgx-a100", "--gpus", "256", "--model",
                               "gpt-22b", "--search", "--top", "10", "--svg", svg, "--json"},
                              {}, {}, 60s);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const json::Value v = json::parse(out.out, "tpf plan --search --json");
  const json::Value& search = v.at("search");
  EXPECT_GT(search.at("evaluated").as_int(), 100);
  const json::Value& ranked = search.at("ranked");
  ASSERT_EQ(ranked.size(), 10u);
  for (size_t i = 1; i < ranked.size(); ++i) {
    if (ranked.at(i).at("fits").as_bool()) {
      EXPECT_GE(ranked.at(i - 1).at("tokens_per_s").as_double(),
                ranked.at(i).at("tokens_per_s").as_double());
    }
  }
  EXPECT_GE(search.at("why_best").size(), 3u);
  const std::string picture = read_file(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  EXPECT_EQ(count_of(picture, "tok/s</text>"), 10u);  // one bar per ranked layout
}

TEST(PlanCommand, CollectiveShowsAlgorithmsAndWhatRoutingDoes) {
  const Outcome out =
      run_tpf({"plan", "collective", "--cluster", "dgx-h100", "--gpus", "1024", "--op",
               "all_reduce", "--bytes", "1M:1G", "--ranks", "4", "--stride", "256"},
              {}, {}, 30s);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  for (const char* part : {"ring", "tree", "busbw", "ecmp, 1 QP", "ecmp, 4 QPs", "adaptive",
                           "spray", "worst switch link"}) {
    EXPECT_TRUE(contains(out.out, part)) << part << "\n" << out.out;
  }
  EXPECT_EQ(count_of(out.out, "  *\n"), 6u);  // one chosen algorithm per size, 1M..1G by 4
}

TEST(PlanCommand, ClusterFilesWorkAndShowClusterIsAStartingPoint) {
  ScratchDir dir;
  const Outcome shown = run_tpf({"plan", "show-cluster", "dgx-h100", "--gpus", "64"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  std::string yaml = shown.out;
  const std::string from = "queue_pairs: 1";
  ASSERT_NE(yaml.find(from), std::string::npos) << yaml;
  yaml.replace(yaml.find(from), from.size(), "queue_pairs: 4");
  std::ofstream(dir / "mine.yaml") << yaml;
  const Outcome planned = run_tpf({"plan", "--cluster", dir / "mine.yaml", "--model", "gpt-7b",
                                   "--layout", "tp=8,pp=1,dp=8", "--json"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_EQ(json::parse(planned.out, "plan").at("cluster").at("queue_pairs").as_int(), 4);
}

TEST(PlanCommand, BadInputIsNamed) {
  ScratchDir dir;
  std::ofstream(dir / "bad.yaml") << "nodes: 4\nnetwork:\n  radix: 64\n";
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-9000", "--layout", "tp=8"}, 1, "gpt-9000"},
      {{"plan", "--cluster", "dgx-h100", "--gpus", "64", "--model", "gpt-7b", "--layout",
        "tp=8,pp=2,dp=2"},
       2,
       "32 GPUs but the cluster has 64"},
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-7b", "--layout", "tp=8,bogus=1"},
       1,
       "bogus"},
      {{"plan", "--cluster", dir / "bad.yaml", "--model", "gpt-7b", "--layout", "tp=8,dp=4"},
       1,
       "network.radix: unknown key"},
      {{"plan", "--cluster", "dgx-h100", "--gpus", "12", "--model", "gpt-7b", "--search"},
       1,
       "multiple"},
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-7b"}, 2, "--layout or --search"},
      {{"plan", "collective", "--cluster", "dgx-h100", "--ranks", "8", "--bytes", "1Q"},
       2,
       "--bytes"},
      {{"plan", "collective", "--cluster", "dgx-h100", "--ranks", "8", "--bytes", "1M", "--op",
        "all_sum"},
       1,
       "all_sum"},
  };
  for (const Case& c : cases) {
    const Outcome out = run_tpf(c.args);
    EXPECT_EQ(out.exit_code, c.exit_code) << c.message << "\n" << out.err;
    EXPECT_TRUE(contains(out.err, c.message)) << "expected '" << c.message << "' in:\n" << out.err;
  }
}

// `tpf plan calibrate-network` on the runs saved from this machine: the fitted settings, the
// held-out error by group and the choice check; and its bad input named.
TEST(PlanCommand, CalibrateNetworkFitsTheSavedRunsAndNamesBadInput) {
  const std::string runs = std::string(TPF_SOURCE_DIR) + "/docs/results/calibration-network/";
  std::vector<std::string> args = {"plan", "calibrate-network", "--train-hosts", "2", "--bench"};
  for (const char* name : {"all_reduce-2x1-1gbit-latency-one_shot-r1.json",
                           "all_reduce-2x1-1gbit-latency-pipelined-r1.json",
                           "all_reduce-2x1-1gbit-bandwidth-one_shot-r1.json",
                           "all_reduce-2x1-1gbit-bandwidth-pipelined-r1.json",
                           "all_reduce-4x1-1gbit-bandwidth-pipelined-r1.json"}) {
    args.push_back(runs + name);
  }
  const Outcome out = run_tpf(args);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(contains(out.out, "fitted constants")) << out.out;
  EXPECT_TRUE(contains(out.out, "TPF_NET_GBPS=0.1")) << out.out;  // the 1 Gb/s cap, 0.125 GB/s
  EXPECT_TRUE(contains(out.out, "hosts=4 all_reduce pipelined")) << out.out;
  EXPECT_TRUE(contains(out.out, "picks the faster algorithm at")) << out.out;

  ScratchDir dir;
  std::ofstream(dir / "auto.json") << "{\"collective\":\"all_reduce\",\"nranks\":2,\"hosts\":2,"
                                      "\"network_algorithm\":\"automatic\",\"rows\":[]}";
  const Outcome automatic = run_tpf({"plan", "calibrate-network", "--bench", dir / "auto.json"});
  EXPECT_EQ(automatic.exit_code, 1) << automatic.err;
  EXPECT_TRUE(contains(automatic.err, "TPF_NET_ALGO")) << automatic.err;
  const Outcome none = run_tpf({"plan", "calibrate-network"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "--bench")) << none.err;
  const Outcome hosts =
      run_tpf({"plan", "calibrate-network", "--train-hosts", "1", "--bench", runs + "x.json"});
  EXPECT_EQ(hosts.exit_code, 2) << hosts.err;
  EXPECT_TRUE(contains(hosts.err, "--train-hosts")) << hosts.err;
}

}  // namespace
}  // namespace tpf::testing
