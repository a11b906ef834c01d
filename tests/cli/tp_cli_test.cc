// The model commands as a user runs them: `tpf run -n T -- tpf train ...` writes its log, picture
// and checkpoints; greedy `tpf generate` prints the same text at TP 1, 2 and 4; export/import
// round-trips through the command line; bad input gets a clear message, not a crash.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/fake_remote_shell.h"
#include "support/run_tpf.h"
#include "support/scratch_dir.h"
#include "support/training_text.h"

namespace tpf::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

Outcome tpf_on(int ranks, std::vector<std::string> args) {
  std::vector<std::string> full = {"run", "-n", std::to_string(ranks), "--", TPF_BINARY};
  full.insert(full.end(), args.begin(), args.end());
  return run_tpf(full, {}, {}, 90s);
}

TEST(ModelCommands, TrainThenGreedyTextIsTheSameAtEveryTpSize) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt");
  const std::string run = dir / "run";
  const Outcome trained =
      tpf_on(2, {"train", "--preset", "tiny", "--data", text, "--out", run, "--steps", "60"});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, "step     60/60 | loss")) << trained.out;
  EXPECT_TRUE(contains(trained.out, "tokens/s at tp=2,pp=1,dp=1")) << trained.out;
  const std::vector<std::string> records = lines_of(read_file(run + "/log.jsonl"));
  ASSERT_EQ(records.size(), 60u);
  EXPECT_TRUE(contains(records.back(), "\"step\":60")) << records.back();
  EXPECT_TRUE(contains(records.back(), "\"loss\":")) << records.back();
  EXPECT_EQ(read_file(run + "/loss.svg").rfind("<svg", 0), 0u);
  EXPECT_EQ(read_file(run + "/checkpoints/latest"), "step-0000060\n");

  std::vector<std::string> texts;
  for (int tp : {1, 2, 4}) {
    const Outcome g = tpf_on(tp, {"generate", "--checkpoint", run, "--prompt", "The quick",
                                  "--tokens", "80", "--temperature", "0"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    ASSERT_EQ(g.out.rfind("The quick", 0), 0u) << g.out;
    EXPECT_EQ(g.out.size(), std::string("The quick").size() + 80 + 1) << g.out;  // + newline
    texts.push_back(g.out);
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_EQ(texts[0], texts[2]);

  // Export, import at TP 4, and the imported model says the same.
  const Outcome exported = run_tpf({"export", "--checkpoint", run, "--out", dir / "m.safetensors"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const Outcome imported =
      run_tpf({"import", "--in", dir / "m.safetensors", "--out", dir / "imported", "--tp", "4"});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const Outcome again = tpf_on(2, {"generate", "--checkpoint", dir / "imported", "--prompt",
                                   "The quick", "--tokens", "80", "--temperature", "0"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, texts[0]);
}

// A run at a pipeline x tensor-parallel layout leaves a checkpoint that generates at other TP
// sizes.
TEST(ModelCommands, TrainAtALayoutThenGenerateAtAnyTpSize) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt");
  const std::string run = dir / "run";
  const Outcome trained = tpf_on(4, {"train", "--preset", "tiny", "--layout", "tp=2,pp=2", "--data",
                                     text, "--out", run, "--steps", "20"});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, "tokens/s at tp=2,pp=2,dp=1")) << trained.out;
  std::vector<std::string> texts;
  for (int tp : {1, 2}) {
    const Outcome g = tpf_on(tp, {"generate", "--checkpoint", run, "--prompt", "The quick",
                                  "--tokens", "40", "--temperature", "0"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    texts.push_back(g.out);
  }
  EXPECT_EQ(texts[0], texts[1]);
}

// The planner chooses (on this machine's measured rates, so which layout varies with the
// machine); the run says what it chose and trains at it.
TEST(ModelCommands, TrainAtTheLayoutThePlannerChooses) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt");
  const Outcome trained = tpf_on(2, {"train", "--preset", "tiny", "--layout", "auto", "--data",
                                     text, "--steps", "3", "--quiet"});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  const std::string said = "--layout auto chose ";
  const size_t at = trained.out.find(said);
  ASSERT_NE(at, std::string::npos) << trained.out;
  const std::string chosen = trained.out.substr(
      at + said.size(), trained.out.find(':', at + said.size()) - at - said.size());
  EXPECT_TRUE(chosen == "tp=2,pp=1,dp=1" || chosen == "tp=1,pp=2,dp=1") << trained.out;
  EXPECT_TRUE(contains(trained.out, "tokens/s at " + chosen)) << trained.out;
  // tiny's default of one micro-batch per step leaves dp=2 out, with the reason.
  EXPECT_TRUE(contains(trained.out, "tp=1,pp=1,dp=2             cannot run: dp=2 does not divide"))
      << trained.out;
}

// --predict: the planner's prediction of the run's own layout, before it trains.
TEST(ModelCommands, TrainPrintsThePlannersPredictionOfItsLayout) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt");
  const Outcome trained = tpf_on(2, {"train", "--preset", "tiny", "--layout", "pp=2", "--data",
                                     text, "--steps", "2", "--quiet", "--predict"});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, "tpf train: the planner predicts ")) << trained.out;
  EXPECT_TRUE(contains(trained.out, " tokens/s at tp=1,pp=2,dp=1 on this-host (compute "))
      << trained.out;
  EXPECT_TRUE(contains(trained.out, "PP bubble")) << trained.out;
}

// Across hosts (two named hosts on this machine, the fabric's network between them) the
// prediction and --layout auto's ranking are of those hosts: a node each, sharing this machine's
// cores, joined at the rate TPF_NET_GBPS states.
TEST(ModelCommands, TrainPredictsItsRunAcrossHosts) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt");
  FakeRemoteShell rsh(FakeRemoteShell::Hosts::named_nodes);
  ASSERT_TRUE(rsh.ok());
  auto train_across_hosts = [&](const std::string& layout, std::vector<std::string> more) {
    std::vector<std::string> args = {"run",       "--hosts",  "host-a:1,host-b:1",
                                     "--rsh",     rsh.path(), "--store-bind",
                                     "127.0.0.1", "--",       TPF_BINARY,
                                     "train",     "--preset", "tiny",
                                     "--layout",  layout,     "--data",
                                     text,        "--steps",  "2",
                                     "--quiet"};
    args.insert(args.end(), more.begin(), more.end());
    return run_tpf(args, {"TPF_NET_GBPS=0.125"}, {}, 90s);
  };
  const Outcome trained = train_across_hosts("pp=2", {"--predict"});
  ASSERT_EQ(trained.exit_code, 0) << trained.out << trained.err;
  EXPECT_TRUE(contains(trained.out, " tokens/s at tp=1,pp=2,dp=1 on this-host as 2 hosts ("))
      << trained.out;

  // --layout auto ranks the layouts on those hosts and trains at its choice.
  const Outcome chosen = train_across_hosts("auto", {});
  ASSERT_EQ(chosen.exit_code, 0) << chosen.out << chosen.err;
  EXPECT_TRUE(contains(chosen.out, "layouts on this-host as 2 hosts (")) << chosen.out;
}

TEST(ModelCommands, BadInputGetsAClearMessage) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt", 5000);
  struct Case {
    std::vector<std::string> args;
    int ranks;
    int exit_code;  // of tpf itself (1) or of the command line check (2); through tpf run: 1
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"train", "--preset", "huge", "--data", text}, 0, 1, "unknown preset 'huge'"},
      {{"train", "--preset", "tiny"}, 0, 2, "--data is required"},
      {{"train", "--preset", "tiny", "--config", "x.json", "--data", text},
       0,
       2,
       "exactly one of --preset, --config or --resume"},
      {{"train", "--preset", "tiny", "--data", dir / "missing.txt"},
       0,
       1,
       "cannot read training text"},
      {{"train", "--preset", "tiny", "--data", text, "--steps", "ten"},
       0,
       2,
       "--steps must be an integer"},
      {{"train", "--resume", dir / "nothing", "--data", text}, 0, 1, "neither a checkpoint"},
      {{"generate", "--checkpoint", dir / "nothing", "--prompt", "x"},
       0,
       1,
       "neither a checkpoint"},
      {{"generate", "--checkpoint", dir / ".", "--prompt", "x", "--temperature", "-1"},
       0,
       2,
       "--temperature must be a number >= 0"},
      {{"import", "--in", text, "--out", dir / "x"}, 0, 1, "text.txt"},
      // 4 heads cannot be split over 3 ranks.
      {{"train", "--preset", "tiny", "--data", text, "--steps", "1"},
       3,
       1,
       "tp=3 does not divide the model's 4 attention heads"},
      {{"train", "--preset", "tiny", "--data", text, "--layout", "tp=2"},
       0,
       1,
       "tp=2,pp=1,dp=1 needs 2 ranks (tp x pp x dp), but the job has 1"},
      {{"train", "--preset", "tiny", "--data", text, "--layout", "dp=2"},
       2,
       1,
       "dp=2 does not divide train.grad_accum (1 micro-batches per step)"},
      {{"train", "--preset", "tiny", "--data", text, "--layout", "pp=2,vp=2"},
       2,
       1,
       "4 chunks of equal size, but the model has 2 layers"},
      {{"train", "--preset", "tiny", "--data", text, "--layout", "pp=2,first=3"},
       2,
       1,
       "first=3 is 3 layers, more than the model's 2 layers"},
      {{"train", "--preset", "tiny", "--data", text, "--layout", "auto"},
       3,
       1,
       "--layout auto: no layout of 3 ranks can run"},
      {{"train", "--preset", "tiny", "--data", text, "--trace", dir / "missing/trace.json"},
       0,
       1,
       "--trace: cannot write"},
  };
  for (const Case& c : cases) {
    const Outcome r = c.ranks > 0 ? tpf_on(c.ranks, c.args) : run_tpf(c.args, {}, {}, 60s);
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    EXPECT_FALSE(r.timed_out) << cmd;
    EXPECT_EQ(r.exit_code, c.exit_code) << cmd << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << cmd << "\nstderr: " << r.err;
  }
}

}  // namespace
}  // namespace tpf::testing
