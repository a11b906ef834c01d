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
      // A preset has no size: --search must not silently plan its one-node default.
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-7b", "--search"},
       2,
       "--search needs --gpus (or a cluster file that says how many nodes); 'dgx-h100' is a "
       "preset"},
      {{"plan", "--cluster", "dgx-h100", "--gpus", "64", "--model", "gpt-7b", "--search", "--with",
        "precision=fp8,pp=2"},
       1,
       "the search's framework options are precision, attention and overlap only"},
      {{"plan", "--cluster", "dgx-a100", "--gpus", "64", "--model", "gpt-7b", "--search", "--with",
        "precision=fp8"},
       1,
       "precision=fp8: the accelerator A100-SXM-80GB has no FP8 peak"},
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-7b", "--layout", "tp=8", "--with",
        "precision=fp8"},
       2,
       "--with applies to --search"},
      {{"plan", "--cluster", "dgx-h100", "--model", "gpt-7b", "--layout", "tp=8",
        "--allow-batch-rounding"},
       2,
       "--allow-batch-rounding applies to --search"},
      // On 1,000 GPUs every DP size gpt-175b leaves (5 .. 1000) misses 1536: said, not "TP
      // must divide the heads".
      {{"plan", "--cluster", "dgx-h100", "--gpus", "1000", "--model", "gpt-175b", "--search",
        "--global-batch", "1536"},
       1,
       "splits the global batch of 1536 sequences: the data-parallel sizes the GPU count leaves "
       "(with TP dividing the heads and PP splitting the layers) are 5, 10, 20, 25, 40, 50, 100, "
       "125, 200, 250, 500, 1000"},
      {{"plan", "show-cluster", "dgx-h100", "--cluster", "dgx-a100"},
       2,
       "give the cluster once: as the argument ('dgx-h100') or as --cluster ('dgx-a100')"},
      {{"plan", "show-model"}, 2, "show-model needs a preset name or file"},
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

// show-cluster and show-model take the name as `tpf plan` does (--cluster, --model) too.
TEST(PlanCommand, MixturesOfExpertsShowTheirExpertsAndAllToAlls) {
  const Outcome out = run_tpf({"plan", "--cluster", "dgx-h100", "--model", "mixtral-8x7b",
                               "--layout", "tp=2,sp=1,pp=1,dp=32,ep=8,etp=1,zero=1"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  for (const char* part : {"8 experts, 2 per token (12.88B parameters active)", "EP comm",
                           "ep=8,etp=1", "+experts:"}) {
    EXPECT_TRUE(contains(out.out, part)) << part << "\n" << out.out;
  }
  const Outcome bad = run_tpf(
      {"plan", "--cluster", "dgx-h100", "--model", "mixtral-8x7b", "--layout", "tp=1,dp=48,ep=6"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.err, "experts (8) are not divisible by ep")) << bad.err;
}

TEST(PlanCommand, ShowCommandsTakeTheNameAsAnOptionToo) {
  const Outcome positional = run_tpf({"plan", "show-cluster", "dgx-a100", "--gpus", "16"});
  const Outcome named = run_tpf({"plan", "show-cluster", "--cluster", "dgx-a100", "--gpus", "16"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(named.out, positional.out);
  EXPECT_TRUE(contains(named.out, "nodes: 2")) << named.out;
  const Outcome model = run_tpf({"plan", "show-model", "--model", "gpt-7b"});
  ASSERT_EQ(model.exit_code, 0) << model.err;
  EXPECT_EQ(model.out, run_tpf({"plan", "show-model", "gpt-7b"}).out);
}

// The search runs every layout at the batch asked for (the model's or --global-batch) unless
// --allow-batch-rounding: gpt-175b on 1,024 GPUs at 1536 sequences, where DP 1024 (tp=1, pp=1)
// does not divide the batch. Without the flag no layout runs another batch and the skipped ones
// are counted and said; with it, some run a larger one, as the output says.
TEST(PlanCommand, SearchKeepsTheBatchUnlessAskedToRoundIt) {
  const std::vector<std::string> search = {"plan",  "--cluster", "dgx-h100", "--gpus",
                                           "1024",  "--model",   "gpt-175b", "--search",
                                           "--top", "1000",      "--json"};
  const Outcome kept = run_tpf(search);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const json::Value v = json::parse(kept.out, "tpf plan --search --json");
  const json::Value& result = v.at("search");
  EXPECT_EQ(result.at("asked_global_batch").as_int(), 1536);
  EXPECT_EQ(result.at("layouts_with_larger_batch").as_int(), 0);
  EXPECT_GT(result.at("layouts_skipped_for_the_batch").as_int(), 0);
  const json::Value& ranked = result.at("ranked");
  ASSERT_GT(ranked.size(), 10u);
  for (size_t i = 0; i < ranked.size(); ++i) {
    const std::string layout = ranked.at(i).at("layout").as_string();
    EXPECT_TRUE(contains(layout, ",gb=1536,")) << layout;
  }

  std::vector<std::string> rounding = search;
  rounding.push_back("--allow-batch-rounding");
  const Outcome rounded = run_tpf(rounding);
  ASSERT_EQ(rounded.exit_code, 0) << rounded.err;
  const json::Value rounded_json = json::parse(rounded.out, "tpf plan --search --json, rounded");
  const json::Value& r = rounded_json.at("search");
  EXPECT_GT(r.at("layouts_with_larger_batch").as_int(), 0);
  EXPECT_GT(r.at("evaluated").as_int(), result.at("evaluated").as_int());

  std::vector<std::string> table(search.begin(), search.end() - 1);  // no --json
  const Outcome text = run_tpf(table);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "global batch: 1536 sequences (the model's); ")) << text.out;
  EXPECT_TRUE(contains(text.out, "layouts skipped because dp x micro-batch does not divide it"))
      << text.out;
}

// A group of one GPU has no collective to describe; counts take their noun in the right number.
TEST(PlanCommand, OneGpuGroupsAndSingleSwitchesReadRight) {
  const Outcome out =
      run_tpf({"plan", "--cluster", "dgx-h100", "--model", "gpt-7b", "--layout", "tp=8,pp=1,dp=1"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(contains(out.out, "DP gradients           none (a group of one GPU)")) << out.out;
  EXPECT_FALSE(contains(out.out, "DP gradients           ,")) << out.out;
  EXPECT_TRUE(contains(out.out, "8 NICs, 8 leaves (each with 32 ports down, 32 up), 32 spines"))
      << out.out;
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
                           "all_reduce-4x1-1gbit-bandwidth-pipelined-r1.json",
                           "broadcast-4x1-1gbit-bandwidth-one_shot-r1.json",
                           "broadcast-4x1-1gbit-bandwidth-pipelined-r1.json",
                           "broadcast-4x1-1gbit-bandwidth-tree-r1.json"}) {
    args.push_back(runs + name);
  }
  const Outcome out = run_tpf(args);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(contains(out.out, "fitted constants")) << out.out;
  EXPECT_TRUE(contains(out.out, "TPF_NET_GBPS=0.1")) << out.out;  // the 1 Gb/s cap, 0.125 GB/s
  EXPECT_TRUE(contains(out.out, "hosts=4 all_reduce pipelined")) << out.out;
  EXPECT_TRUE(contains(out.out, "picks the faster algorithm at")) << out.out;
  // A broadcast's tree is predicted and compared with the other forms measured at its sizes.
  EXPECT_TRUE(contains(out.out, "hosts=4 broadcast  tree")) << out.out;
  EXPECT_TRUE(contains(out.out, "pipelined ") && contains(out.out, "  tree ")) << out.out;

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

// `tpf plan calibrate` takes one file per --bench: a second word after it is an unexpected
// argument, named, not a second file; repeated --bench options are all read.
TEST(PlanCommand, CalibrateTakesOneFilePerBench) {
  const std::string runs = std::string(TPF_SOURCE_DIR) + "/docs/results/calibration/";
  const Outcome two_words =
      run_tpf({"plan", "calibrate", "--bench", runs + "all_reduce_n2_one_shot_r1.json",
               runs + "all_reduce_n2_two_shot_r1.json"});
  EXPECT_EQ(two_words.exit_code, 2) << two_words.err;
  EXPECT_TRUE(
      contains(two_words.err, "unexpected argument '" + runs + "all_reduce_n2_two_shot_r1.json'"))
      << two_words.err;
  std::vector<std::string> args = {"plan", "calibrate"};
  for (const char* name : {"one_shot", "two_shot"}) {
    for (int run = 1; run <= 3; ++run) {
      args.push_back("--bench");
      args.push_back(runs + "all_reduce_n2_" + name + "_r" + std::to_string(run) + ".json");
    }
  }
  const Outcome repeated = run_tpf(args);
  ASSERT_EQ(repeated.exit_code, 0) << repeated.err;
  EXPECT_TRUE(contains(repeated.out, "N=2 one_shot")) << repeated.out;
  EXPECT_TRUE(contains(repeated.out, "N=2 two_shot")) << repeated.out;
}

}  // namespace
}  // namespace tpf::testing
