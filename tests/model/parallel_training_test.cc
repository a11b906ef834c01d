// Training at tensor x pipeline x data-parallel layouts (tpf train --layout): the loss trajectory
// of every layout with sizes in {1, 2} stays within a fixed band of the single-rank run's; the
// same run twice is bit-identical; data-parallel replicas and the tied embedding's two copies stay
// bit-identical; a checkpoint saved at one layout resumes at another; bad layouts are named.
//
// The band: 1e-3 nats per step, as for TP alone (tp_training_test.cc). A layout changes only the
// order of fp32 sums (gradients summed over DP ranks and across micro-batches in another order,
// the norm summed per stage); measured over 100 steps of the tiny preset the largest difference to
// one rank is ~1e-5, while a wrong gradient or a lost micro-batch moves the loss by 0.01-1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "formats/json.h"
#include "formats/text_files.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/parallel_step.h"
#include "model/pipeline_schedule.h"
#include "model/train_layout.h"
#include "model/trainer.h"
#include "support/expect_tpf_error.h"
#include "support/multiproc.h"
#include "support/scratch_dir.h"
#include "support/test_environment.h"
#include "support/training_text.h"
#include "tensor/blas.h"

namespace tpf::testing {
namespace {

namespace fs = std::filesystem;

constexpr double kLossBand = 1e-3;
// Sanitizer builds run the same checks over fewer steps (a wrong gradient shows within a few).
constexpr int64_t kSteps = kSanitizedBuild ? 24 : 100;

RunOptions run_options() {
  RunOptions o;
  o.comm_options.timeout = std::chrono::milliseconds(60000);
  o.deadline = std::chrono::milliseconds(110000);
  return o;
}

// The tiny preset with 4 micro-batches of 4 sequences per step, so that dp = 2 runs 2 each and a
// 2-stage pipeline has micro-batches to overlap.
TrainOptions tiny_options(const std::string& data, const std::string& out,
                          const std::string& layout) {
  TrainOptions o;
  o.config = preset_config("tiny");
  o.config.train.steps = kSteps;
  o.config.train.grad_accum = 4;
  o.config.train.batch_size = 4;
  o.data_path = data;
  o.out_dir = out;
  o.seed = 5;
  o.progress = false;
  o.layout = layout;
  return o;
}

// The same with 4 layers, so that pp=2,vp=2 has a layer per chunk.
TrainOptions four_layer_options(const std::string& data, const std::string& out,
                                const std::string& layout) {
  TrainOptions o = tiny_options(data, out, layout);
  o.config.model.layers = 4;
  return o;
}

void train_ranks(int ranks, const TrainOptions& options) {
  expect_all_ok(run_ranks(
      ranks,
      [&](Communicator& comm) {
        set_blas_threads(1);  // see tp_training_test.cc: spinning BLAS threads on a busy machine
        train(comm, options);
      },
      run_options()));
}

struct Log {
  std::vector<double> loss, grad_norm;
};

Log read_log(const std::string& out_dir) {
  Log log;
  std::ifstream in(out_dir + "/log.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const json::Value v = json::parse(line, "log");
    log.loss.push_back(v.at("loss").as_double());
    log.grad_norm.push_back(v.at("grad_norm").as_double());
  }
  return log;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

struct LayoutCase {
  const char* layout;
  int ranks;
  bool sequence_parallel;
};

class LayoutBand : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutBand, StaysWithinABandOfOneRank) {
  const LayoutCase c = GetParam();
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  train_ranks(1, tiny_options(data, dir / "one", "tp=1"));
  TrainOptions options = tiny_options(data, dir / "layout", c.layout);
  options.sequence_parallel = c.sequence_parallel;
  train_ranks(c.ranks, options);
  const Log one = read_log(dir / "one"), layout = read_log(dir / "layout");
  ASSERT_EQ(one.loss.size(), static_cast<size_t>(kSteps));
  const double worst = max_difference(one.loss, layout.loss);
  std::printf("%s%s vs one rank: largest loss difference over %lld steps %.3g\n", c.layout,
              c.sequence_parallel ? " +sp" : "", static_cast<long long>(kSteps), worst);
  EXPECT_LE(worst, kLossBand);
  EXPECT_LT(layout.loss.back(), one.loss.front() - 1.0) << "it learns";
}

// A 3-layer model split 1 + 2 (last=2) where the default is 2 + 1: the same numbers.
TEST(ParallelTraining, UserChosenStageSizesTrainTheSameModel) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  TrainOptions one = tiny_options(data, dir / "one", "tp=1");
  one.config.model.layers = 3;
  train_ranks(1, one);
  TrainOptions split = one;
  split.out_dir = dir / "split";
  split.layout = "pp=2,last=2";
  split.on_finish = [](Gpt& model, TrainGroups& groups) {
    // The first stage holds layer 0 only, the last layers 1 and 2.
    TPF_CHILD_CHECK(
        model.stage().end_layer - model.stage().first_layer == (groups.stage() == 0 ? 1 : 2),
        "stage " + std::to_string(groups.stage()) + " has the wrong layers");
  };
  train_ranks(2, split);
  const double worst = max_difference(read_log(dir / "one").loss, read_log(dir / "split").loss);
  std::printf("pp=2,last=2 vs one rank: largest loss difference %.3g\n", worst);
  EXPECT_LE(worst, kLossBand);
}

INSTANTIATE_TEST_SUITE_P(
    TrainLayouts, LayoutBand,
    ::testing::Values(LayoutCase{"tp=2", 2, false}, LayoutCase{"pp=2", 2, false},
                      LayoutCase{"dp=2", 2, false}, LayoutCase{"tp=2,pp=2", 4, false},
                      LayoutCase{"tp=2,dp=2", 4, false}, LayoutCase{"pp=2,dp=2", 4, false},
                      LayoutCase{"tp=2,pp=2,dp=2", 8, false},
                      LayoutCase{"tp=2,pp=2,dp=2", 8, true}),
    [](const ::testing::TestParamInfo<LayoutCase>& info) {
      std::string name = info.param.layout;
      for (char& ch : name) {
        if (ch == '=' || ch == ',') ch = '_';
      }
      return name + (info.param.sequence_parallel ? "_sp" : "");
    });

TEST(ParallelTraining, SameRunTwiceIsBitIdentical) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  for (const char* name : {"a", "b"})
    train_ranks(8, tiny_options(data, dir / name, "tp=2,pp=2,dp=2"));
  const Log a = read_log(dir / "a"), b = read_log(dir / "b");
  ASSERT_EQ(a.loss.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
}

// Overlapping the TP input-gradient reductions and the DP gradient sums (buckets, or ZeRO-1's
// reduces onto each share's owner) with compute changes when the sums are made, not what they
// are: every loss and norm is bit-identical. The ZeRO-1 cases hold the tied embedding back until
// its copies are summed, and sum sequence parallelism's partials group by group.
TEST(ParallelTraining, OverlapLeavesEveryNumberUnchanged) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  for (const LayoutCase& c :
       {LayoutCase{"tp=2,dp=2", 4, false}, LayoutCase{"tp=2,pp=2,dp=2", 8, true},
        LayoutCase{"dp=4", 4, false}, LayoutCase{"pp=2,dp=2,zero1", 4, false},
        LayoutCase{"tp=2,pp=2,dp=2,zero1", 8, true}, LayoutCase{"dp=4,zero1", 4, false}}) {
    std::vector<Log> logs;
    for (const bool overlap : {false, true}) {
      const std::string out = dir / (std::string(c.layout) + (overlap ? "-overlap" : "-serial"));
      TrainOptions options = tiny_options(data, out, c.layout);
      options.config.train.steps = 20;
      options.config.train.tp_comm_overlap = overlap;
      options.config.train.dp_comm_overlap = overlap;
      options.sequence_parallel = c.sequence_parallel;
      train_ranks(c.ranks, options);
      logs.push_back(read_log(out));
    }
    ASSERT_EQ(logs[0].loss.size(), 20u) << c.layout;
    EXPECT_EQ(logs[0].loss, logs[1].loss) << c.layout;
    EXPECT_EQ(logs[0].grad_norm, logs[1].grad_norm) << c.layout;
  }
}

// ZeRO-1 takes the same steps as plain data parallelism: only the order of some sums differs
// (the tied copies and sequence parallelism's partials are summed before the DP reduction, the
// norm is summed share by share), so the losses stay within the band, and without those sums
// (pp = 1, no sequence parallelism) nothing but the norm's summation order differs. Its
// checkpoints hold whole moments: a ZeRO-1 run resumes without it and the reverse.
TEST(ParallelTraining, ZeroOneFollowsPlainDataParallelism) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  for (const LayoutCase& c :
       {LayoutCase{"dp=2", 2, false}, LayoutCase{"tp=2,pp=2,dp=2", 8, true}}) {
    std::vector<Log> logs;
    for (const char* zero : {"", ",zero1"}) {
      const std::string layout = std::string(c.layout) + zero;
      TrainOptions options = tiny_options(data, dir / layout, layout);
      options.sequence_parallel = c.sequence_parallel;
      train_ranks(c.ranks, options);
      logs.push_back(read_log(dir / layout));
    }
    ASSERT_EQ(logs[1].loss.size(), static_cast<size_t>(kSteps));
    const double worst = max_difference(logs[0].loss, logs[1].loss);
    std::printf("%s,zero1 vs %s: largest loss difference over %lld steps %.3g\n", c.layout,
                c.layout, static_cast<long long>(kSteps), worst);
    EXPECT_LE(worst, kLossBand) << c.layout;
  }
  // Resume the ZeRO-1 run's last checkpoint (step kSteps) for 4 more steps without ZeRO, and the
  // plain run's with it: both continue alike.
  std::vector<Log> tails;
  for (const auto& [from, layout] : {std::pair{"tp=2,pp=2,dp=2,zero1", "tp=2,dp=2"},
                                     std::pair{"tp=2,pp=2,dp=2", "pp=2,dp=2,zero1"}}) {
    const std::string out = dir / (std::string("resumed-") + layout);
    TrainOptions options = tiny_options(data, out, layout);
    options.resume = dir / from;
    options.steps = kSteps + 4;
    options.sequence_parallel = true;
    train_ranks(4, options);
    tails.push_back(read_log(out));
    ASSERT_EQ(tails.back().loss.size(), 4u) << layout;
  }
  EXPECT_LE(max_difference(tails[0].loss, tails[1].loss), kLossBand);
}

// One step at each of `cases` (the first is the reference) of a tiny model with `layers` layers;
// expects every parameter's gradient to equal the reference's within 1e-5 of the parameter's
// largest gradient element. Returns the parameters compared and the largest difference found, as
// a share of that element.
std::pair<size_t, double> compare_one_step_gradients(const std::vector<LayoutCase>& cases,
                                                     int64_t layers) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  for (const LayoutCase& c : cases) {
    const std::string out = dir / c.layout;
    fs::create_directories(out);
    TrainOptions options = tiny_options(data, "", c.layout);
    options.config.model.layers = layers;
    options.config.train.steps = 1;
    options.on_finish = [out](Gpt& model, TrainGroups& g) {
      if (g.data->rank() != 0) return;  // the replicas' gradients are the same sums
      for (const Parameter* p : model.parameters()) {
        if (p == model.tied_embedding_copy()) continue;
        std::ofstream(out + "/" + p->name, std::ios::binary)
            .write(static_cast<const char*>(p->grad.data()),
                   static_cast<std::streamsize>(p->grad.bytes()));
      }
    };
    train_ranks(c.ranks, options);
  }
  auto read_floats = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<float> v;
    float x;
    while (in.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
    return v;
  };
  size_t compared = 0;
  double worst_share = 0;
  for (const auto& entry : fs::directory_iterator(dir / cases[0].layout)) {
    const std::vector<float> want = read_floats(entry.path().string());
    float largest = 0;
    for (float x : want) largest = std::max(largest, std::abs(x));
    for (size_t i = 1; i < cases.size(); ++i) {
      const std::string name = entry.path().filename().string();
      const std::vector<float> got = read_floats(dir / (std::string(cases[i].layout) + "/" + name));
      EXPECT_EQ(got.size(), want.size()) << cases[i].layout << " " << name;
      if (got.size() != want.size()) continue;
      float worst = 0;
      for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(got[k] - want[k]));
      EXPECT_LE(worst, 1e-5f * largest) << cases[i].layout << " " << name;
      worst_share = std::max(worst_share, static_cast<double>(worst / largest));
      ++compared;
    }
  }
  return {compared, worst_share};
}

// Each schedule against a sequential execution of the same micro-batches: after one step, every
// parameter's gradient at pp=2, dp=2 and pp=2,dp=2 equals one rank's to float rounding (the sums
// over micro-batches, replicas and the tied copies are made in another order). Tolerance: 1e-5 of
// the parameter's largest gradient element (measured: 7e-7 at most; a lost micro-batch or a wrong
// activation is an O(1) difference).
TEST(ParallelTraining, OneStepGradientsEqualSequentialExecution) {
  const auto [compared, worst] = compare_one_step_gradients(
      {{"tp=1", 1, false}, {"pp=2", 2, false}, {"dp=2", 2, false}, {"pp=2,dp=2", 4, false}}, 2);
  std::printf(
      "one step at pp=2, dp=2, pp=2,dp=2 vs one rank: worst gradient difference %.3g of "
      "the parameter's largest element\n",
      worst);
  EXPECT_EQ(compared, 3u * (4 + 12 * 2));  // wte, wpe, ln_f (2), 12 per block, 3 layouts
}

// The interleaved schedule likewise, on 4 layers: rank 0 holds layers 0 and 2, rank 1 layers 1
// and 3, so every micro-batch crosses between the ranks three times each way.
TEST(ParallelTraining, InterleavedStagesEqualSequentialExecution) {
  const auto [compared, worst] = compare_one_step_gradients(
      {{"tp=1", 1, false}, {"pp=2,vp=2", 2, false}, {"pp=2,dp=2,vp=2", 4, false}}, 4);
  std::printf(
      "one step at pp=2,vp=2 and pp=2,dp=2,vp=2 vs one rank: worst gradient difference %.3g of "
      "the parameter's largest element\n",
      worst);
  EXPECT_EQ(compared, 2u * (4 + 12 * 4));
}

uint64_t fingerprint(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

// Every DP replica holds bit-identical parameters after training, and the last stage's copy of the
// tied embedding equals the first stage's: with plain DP and with ZeRO-1 (whose replicas update
// different shares and all-gather them).
class ReplicaCheck : public ::testing::TestWithParam<const char*> {};

// Fails the rank unless every DP replica's parameters and the tied embedding's two copies are
// bit-identical (a TrainOptions::on_finish).
void check_replicas_and_tied_copies(Gpt& model, TrainGroups& g) {
  std::vector<uint64_t> mine;
  for (const Parameter* p : model.parameters()) mine.push_back(fingerprint(p->value));
  std::vector<uint64_t> all(mine.size() * static_cast<size_t>(g.data->size()));
  g.data->all_gather(mine.data(), all.data(), mine.size(), DType::i64);
  for (size_t r = 1; r < static_cast<size_t>(g.data->size()); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      TPF_CHILD_CHECK(
          all[r * mine.size() + i] == mine[i],
          "DP replica " + std::to_string(r) + " differs in " + model.parameters()[i]->name);
    }
  }
  const int last = g.stages() - 1;
  if (g.stage() == 0 || g.stage() == last) {
    const Tensor& own =
        g.stage() == 0 ? model.parameter("wte.weight").value : model.tied_embedding_copy()->value;
    uint64_t h = fingerprint(own), other = 0;
    const int peer = g.stage() == 0 ? last : 0;
    Work sent = g.pipeline->send_async(&h, 1, DType::i64, peer);
    g.pipeline->recv(&other, 1, DType::i64, peer);
    sent.wait();
    TPF_CHILD_CHECK(h == other, "the tied embedding's copies differ");
  }
}

TEST_P(ReplicaCheck, ReplicasAndTiedCopiesStayBitIdentical) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  TrainOptions options = tiny_options(data, "", GetParam());
  options.config.train.steps = 10;
  options.on_finish = check_replicas_and_tied_copies;
  train_ranks(8, options);
}

INSTANTIATE_TEST_SUITE_P(ParallelTraining, ReplicaCheck,
                         ::testing::Values("tp=2,pp=2,dp=2", "tp=2,pp=2,dp=2,zero1"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.index == 0 ? "PlainDp" : "ZeroOne");
                         });

// Resumes `options` (its out directory and layout set) from `checkpoint` on `ranks` ranks and
// expects the rest of the run within the band of `reference`'s steps after `midway`.
void expect_resumed_run_follows(TrainOptions options, int ranks, const std::string& checkpoint,
                                const Log& reference, int64_t midway) {
  options.resume = checkpoint;
  train_ranks(ranks, options);
  const Log tail = read_log(options.out_dir);
  ASSERT_EQ(tail.loss.size(), static_cast<size_t>(kSteps - midway)) << options.layout;
  const std::vector<double> want(reference.loss.begin() + midway, reference.loss.end());
  const double worst = max_difference(want, tail.loss);
  std::printf("resumed at %s: largest loss difference to the uninterrupted run %.3g\n",
              options.layout.c_str(), worst);
  EXPECT_LE(worst, kLossBand) << options.layout;
}

// A checkpoint saved at tp=2,pp=2,dp=2 resumes at other layouts and continues the run.
TEST(ParallelTraining, ResumingAtAnotherLayoutContinuesTheRun) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  const int64_t midway = kSteps / 2;
  TrainOptions whole = tiny_options(data, dir / "whole", "tp=2,pp=2,dp=2");
  whole.config.train.checkpoint_every = midway;
  train_ranks(8, whole);
  const Log reference = read_log(dir / "whole");
  const std::string checkpoint = checkpoint_dir_for_step(dir / "whole", midway);
  for (const auto& [layout, ranks] : {std::pair{"tp=1", 1}, std::pair{"pp=2,dp=2", 4}}) {
    expect_resumed_run_follows(tiny_options(data, dir / (std::string("resumed-") + layout), layout),
                               ranks, checkpoint, reference, midway);
  }
}

// Interleaved stages on a 4-layer model: the loss stays within the band of one rank's at
// tp=2,pp=2,dp=2,vp=2,zero1 (replicas and tied copies bit-identical at the end), and a checkpoint
// saved there midway resumes at pp=2,vp=2 and at one rank, continuing the run within the band.
TEST(ParallelTraining, InterleavedStagesTrainTheSameModelAndResumeAnywhere) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  const int64_t midway = kSteps / 2;
  train_ranks(1, four_layer_options(data, dir / "one", "tp=1"));
  TrainOptions whole = four_layer_options(data, dir / "whole", "tp=2,pp=2,dp=2,vp=2,zero1");
  whole.config.train.checkpoint_every = midway;
  whole.on_finish = check_replicas_and_tied_copies;
  train_ranks(8, whole);
  const Log one = read_log(dir / "one"), reference = read_log(dir / "whole");
  const double worst = max_difference(one.loss, reference.loss);
  std::printf(
      "tp=2,pp=2,dp=2,vp=2,zero1 vs one rank: largest loss difference over %lld steps %.3g\n",
      static_cast<long long>(kSteps), worst);
  EXPECT_LE(worst, kLossBand);
  EXPECT_LT(reference.loss.back(), reference.loss.front() - 1.0) << "it learns";

  const std::string checkpoint = checkpoint_dir_for_step(dir / "whole", midway);
  for (const auto& [layout, ranks] : {std::pair{"pp=2,vp=2", 2}, std::pair{"tp=1", 1}}) {
    expect_resumed_run_follows(
        four_layer_options(data, dir / (std::string("resumed-") + layout), layout), ranks,
        checkpoint, reference, midway);
  }
}

struct TracedPasses {
  std::map<int64_t, std::string> process_names;  // by pid
  std::map<int64_t, std::string> first_step;     // "forward 0, forward 1, backward 0, ..."
};

// The process names and each rank's forward and backward spans of step 1, in time order.
TracedPasses read_traced_passes(const std::string& path) {
  const json::Value trace = json::parse(read_text_file(path, "trace"), path);
  TracedPasses out;
  std::map<int64_t, std::vector<std::pair<double, std::string>>> passes;
  std::map<int64_t, double> first_step_end;
  for (const json::Value& e : trace.at("traceEvents").as_array()) {
    const int64_t pid = e.at("pid").as_int();
    if (e.at("ph").as_string() == "M" && e.at("name").as_string() == "process_name") {
      out.process_names[pid] = e.at("args").at("name").as_string();
    } else if (e.at("ph").as_string() == "X" && e.at("name").as_string() == "step 1") {
      first_step_end[pid] = e.at("ts").as_double() + e.at("dur").as_double();
    }
  }
  for (const json::Value& e : trace.at("traceEvents").as_array()) {
    if (e.at("ph").as_string() != "X" || e.at("cat").as_string() != "compute") continue;
    const std::string name = e.at("name").as_string();
    const int64_t pid = e.at("pid").as_int();
    if (name.rfind("forward", 0) != 0 && name.rfind("backward", 0) != 0) continue;
    if (e.at("ts").as_double() < first_step_end[pid])
      passes[pid].push_back({e.at("ts").as_double(), name});
  }
  for (auto& [pid, list] : passes) {
    std::sort(list.begin(), list.end());
    std::string& order = out.first_step[pid];
    for (const auto& [ts, name] : list) order += (order.empty() ? "" : ", ") + name;
  }
  return out;
}

// Across hosts: ranks 0-1 say they are on one host and 2-3 on another (TPF_NODE_ID, as in
// across_hosts_test.cc), so the communicators and their splits span two hosts, shared memory
// inside each and UCX (TCP) between them. TP stays inside a host; the interleaved pipeline or
// the ZeRO-1 replicas cross between the hosts. Both train the model one rank trains, within the
// band.
TEST(ParallelTraining, TrainsAcrossHosts) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  train_ranks(1, four_layer_options(data, dir / "one", "tp=1"));
  const Log one = read_log(dir / "one");
  for (const char* layout : {"tp=2,pp=2,vp=2", "tp=2,dp=2,zero1"}) {
    const std::string out = dir / layout;
    const TrainOptions options = four_layer_options(data, out, layout);
    expect_all_ok(run_ranks_raw(
        4,
        [&](const RankContext& ctx) {
          ::setenv("TPF_NODE_ID", ctx.rank < 2 ? "host-a" : "host-b", 1);
          set_blas_threads(1);
          Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address,
                                                   ctx.secret, ctx.comm_options);
          TPF_CHILD_CHECK(comm.host_count() == 2, "the ranks are not on two hosts");
          train(comm, options);
        },
        run_options()));
    const double worst = max_difference(one.loss, read_log(out).loss);
    std::printf("%s on two hosts vs one rank: largest loss difference over %lld steps %.3g\n",
                layout, static_cast<long long>(kSteps), worst);
    EXPECT_LE(worst, kLossBand) << layout;
  }
}

// --trace: one Chrome trace with a process per rank, whose compute spans follow 1F1B, and a log
// whose communication time is the sum of its TP, pipeline and DP parts.
TEST(ParallelTraining, TraceShowsEveryRankRunning1F1B) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  TrainOptions options = tiny_options(data, dir / "run", "tp=2,pp=2");
  options.config.train.steps = 2;
  options.trace_path = dir / "trace.json";
  train_ranks(4, options);
  const TracedPasses traced = read_traced_passes(options.trace_path);
  ASSERT_EQ(traced.process_names.size(), 4u);
  EXPECT_EQ(traced.process_names.at(2), "rank 2 (tp 0, dp 0, stage 1)");
  const std::string first_stage =
      "forward 0, forward 1, backward 0, forward 2, backward 1, forward 3, backward 2, backward 3";
  const std::string last_stage =
      "forward 0, backward 0, forward 1, backward 1, forward 2, backward 2, forward 3, backward 3";
  ASSERT_EQ(traced.first_step.size(), 4u);
  EXPECT_EQ(traced.first_step.at(0), first_stage);
  EXPECT_EQ(traced.first_step.at(1), first_stage);
  EXPECT_EQ(traced.first_step.at(2), last_stage);
  EXPECT_EQ(traced.first_step.at(3), last_stage);

  std::ifstream in(dir / "run/log.jsonl");
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const json::Value r = json::parse(line, "log");
    const double parts = r.at("tp_comm_seconds").as_double() + r.at("pp_wait_seconds").as_double() +
                         r.at("dp_comm_seconds").as_double();
    EXPECT_DOUBLE_EQ(r.at("comm_seconds").as_double(), parts);
    EXPECT_GT(r.at("pp_wait_seconds").as_double(), 0.0);  // the first stage waits for gradients
    ++records;
  }
  EXPECT_EQ(records, 2);
}

// An interleaved run's passes, as its trace shows them, are the schedule's
// (interleaved_one_forward_one_backward, checked by hand in pipeline_schedule_test.cc).
TEST(ParallelTraining, TraceShowsTheInterleavedSchedule) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  TrainOptions options = four_layer_options(data, "", "pp=2,vp=2");
  options.config.train.steps = 1;
  options.trace_path = dir / "trace.json";
  train_ranks(2, options);
  const TracedPasses traced = read_traced_passes(options.trace_path);
  ASSERT_EQ(traced.first_step.size(), 2u);
  for (int stage = 0; stage < 2; ++stage) {
    std::string want;
    for (const PipelinePass& p : interleaved_one_forward_one_backward(2, stage, 2, 4)) {
      want += std::string(want.empty() ? "" : ", ") +
              (p.kind == PipelinePass::Kind::forward ? "forward " : "backward ") +
              std::to_string(p.micro_batch) + " chunk " + std::to_string(p.chunk);
    }
    EXPECT_EQ(traced.first_step.at(stage), want) << "stage " << stage;
  }
}

// --layout auto: rank 0's chooser decides for every rank (tpf train's chooser is the planner's,
// tested in tests/cli/auto_layout_test.cc); its failure fails every rank, none waits.
TEST(ParallelTraining, AutoLayoutTrainsAtRankZerosChoiceOnEveryRank) {
  ScratchDir dir;
  const std::string data = write_training_text(dir / "text.txt");
  TrainOptions options = tiny_options(data, "", kAutoLayout);
  options.config.train.steps = 2;
  expect_all_ok(run_ranks(
      2,
      [&](Communicator& comm) {
        set_blas_threads(1);
        TrainOptions mine = options;
        // Only rank 0 is asked; the others' answer would be wrong if it were used.
        mine.choose_layout = [&comm](const RunConfig& config, int ranks) {
          TPF_CHILD_CHECK(comm.rank() == 0, "the chooser ran on another rank");
          TPF_CHILD_CHECK(ranks == 2 && config.train.grad_accum == 4,
                          "the chooser got another job or configuration");
          return TrainLayout{1, 2, 1, false};
        };
        const TrainSummary summary = train(comm, mine);
        TPF_CHILD_CHECK(summary.layout.to_string() == "tp=1,pp=2,dp=1",
                        "trained at " + summary.layout.to_string());
      },
      run_options()));

  const std::vector<RankOutcome> failed = run_ranks(
      2,
      [&](Communicator& comm) {
        TrainOptions mine = options;
        mine.choose_layout = [](const RunConfig&, int) -> TrainLayout {
          throw Error(ErrorCode::invalid_argument, "no layout fits (test)");
        };
        train(comm, mine);
      },
      run_options());
  ASSERT_EQ(failed.size(), 2u);
  for (const RankOutcome& outcome : failed) {
    EXPECT_TRUE(outcome.exited && !outcome.ok()) << outcome.describe();
    EXPECT_NE(outcome.message.find(outcome.rank == 0 ? "no layout fits (test)"
                                                     : "rank 0 could not choose a layout"),
              std::string::npos)
        << outcome.describe();
  }
  // Without a chooser "auto" is refused, not parsed as sizes.
  const std::vector<RankOutcome> alone = run_ranks(
      1, [&](Communicator& comm) { train(comm, options); }, run_options());
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_FALSE(alone[0].ok());
  EXPECT_NE(alone[0].message.find("layout \"auto\" needs TrainOptions::choose_layout"),
            std::string::npos)
      << alone[0].describe();
}

TEST(TrainLayout, ParsesSizesInAnyOrder) {
  const TrainLayout l = parse_train_layout("dp=4,tp=2");
  EXPECT_EQ(l.tp, 2);
  EXPECT_EQ(l.pp, 1);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.to_string(), "tp=2,pp=1,dp=4");
  EXPECT_TRUE(parse_train_layout("dp=2,zero1").zero1);
  EXPECT_EQ(parse_train_layout("zero1,dp=2").to_string(), "tp=1,pp=1,dp=2,zero1");
  EXPECT_EQ(parse_train_layout("vp=2,pp=2").to_string(), "tp=1,pp=2,dp=1,vp=2");
}

TEST(TrainLayout, BadTextIsNamed) {
  EXPECT_TPF_ERROR(parse_train_layout(""), ErrorCode::invalid_argument, "empty");
  EXPECT_TPF_ERROR(parse_train_layout("tp=2,xp=2"), ErrorCode::invalid_argument, "'xp=2'");
  EXPECT_TPF_ERROR(parse_train_layout("tp=0"), ErrorCode::invalid_argument, "tp=0", "between 1");
  EXPECT_TPF_ERROR(parse_train_layout("tp=2,tp=2"), ErrorCode::invalid_argument, "twice");
  EXPECT_TPF_ERROR(parse_train_layout("pp"), ErrorCode::invalid_argument, "needs a size");
  EXPECT_TPF_ERROR(parse_train_layout("tp=2,mb=2"), ErrorCode::invalid_argument, "'mb'",
                   "not supported");
  EXPECT_TPF_ERROR(parse_train_layout("zero1,zero1"), ErrorCode::invalid_argument, "twice");
}

TEST(TrainLayout, LayoutsThatDoNotFitAreNamed) {
  RunConfig c = preset_config("tiny");  // 2 layers, 4 heads
  c.train.grad_accum = 4;
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("tp=2,pp=2"), 8, c),
                   ErrorCode::invalid_argument, "needs 4 ranks", "the job has 8");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("pp=4"), 4, c),
                   ErrorCode::invalid_argument, "pp=4", "only 2 layers");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("tp=8"), 8, c),
                   ErrorCode::invalid_argument, "tp=8", "4 attention heads");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("dp=3"), 3, c),
                   ErrorCode::invalid_argument, "dp=3", "train.grad_accum (4");
  check_train_layout(parse_train_layout("tp=2,pp=2,dp=2"), 8, c);
  // Interleaving, on 4 layers.
  c.model.layers = 4;
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("vp=2"), 1, c),
                   ErrorCode::invalid_argument, "vp=2", "give pp=2 or more");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("pp=2,vp=4"), 2, c),
                   ErrorCode::invalid_argument, "8 chunks", "4 layers");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("pp=2,vp=2,first=1"), 2, c),
                   ErrorCode::invalid_argument, "leave out first= and last=");
  EXPECT_TPF_ERROR(check_train_layout(parse_train_layout("pp=2,dp=4,vp=2"), 8, c),
                   ErrorCode::invalid_argument, "1 micro-batches", "multiple of pp=2");
  check_train_layout(parse_train_layout("pp=2,dp=2,vp=2"), 4, c);
}

// With vp, rank s holds chunk c = virtual stage c pp + s: layers [(c pp + s) n, (c pp + s + 1) n)
// with n = layers / (pp vp).
TEST(TrainLayout, InterleavedStagesHoldEveryPthChunk) {
  ModelConfig m;
  m.layers = 12;
  const TrainLayout layout = parse_train_layout("pp=3,vp=2");
  const StageSpan middle = pipeline_stage(m, layout, 1);
  EXPECT_EQ(middle.first_layer, 2);
  EXPECT_EQ(middle.end_layer, 4);
  EXPECT_EQ(middle.chunks, 2);
  EXPECT_EQ(middle.chunk_stride, 6);  // layers 2, 3 and 8, 9
  EXPECT_FALSE(middle.first || middle.last);
  EXPECT_TRUE(pipeline_stage(m, layout, 0).first);
  EXPECT_TRUE(pipeline_stage(m, layout, 2).last);  // its chunk 1 ends at layer 12
  // The blocks a rank builds are its chunks' (named by global layer).
  m = preset_config("tiny").model;
  m.layers = 4;
  Gpt model(m, 0, 1, 1, pipeline_stage(m, parse_train_layout("pp=2,vp=2"), 1));
  std::vector<std::string> blocks;
  for (const Parameter* p : model.parameters()) {
    if (p->name.find(".ln_1.weight") != std::string::npos) blocks.push_back(p->name);
  }
  EXPECT_EQ(blocks, (std::vector<std::string>{"h.1.ln_1.weight", "h.3.ln_1.weight"}));
  EXPECT_NE(model.tied_embedding_copy(), nullptr);
}

TEST(TrainLayout, StagesSplitTheLayersWithTheFewestOnTheEnds) {
  ModelConfig m;
  auto sizes = [&](int64_t layers, int stages) {
    m.layers = layers;
    std::vector<int64_t> out;
    int64_t next = 0;
    for (int s = 0; s < stages; ++s) {
      const StageSpan span = pipeline_stage(m, TrainLayout{1, stages, 1}, s);
      EXPECT_EQ(span.first_layer, next);
      EXPECT_EQ(span.first, s == 0);
      EXPECT_EQ(span.last, s == stages - 1);
      out.push_back(span.end_layer - span.first_layer);
      next = span.end_layer;
    }
    EXPECT_EQ(next, layers);
    return out;
  };
  EXPECT_EQ(sizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(sizes(7, 3), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(sizes(10, 4), (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(sizes(5, 3), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes(3, 3), (std::vector<int64_t>{1, 1, 1}));
}

// first= and last= size the end stages; the stages between share the rest as by default.
TEST(TrainLayout, EndStageSizesAreTheUsersWhenGiven) {
  ModelConfig m;
  m.layers = 10;
  auto sizes = [&](const std::string& text) {
    const TrainLayout layout = parse_train_layout(text);
    std::vector<int64_t> out;
    int64_t next = 0;
    for (int s = 0; s < layout.pp; ++s) {
      const StageSpan span = pipeline_stage(m, layout, s);
      EXPECT_EQ(span.first_layer, next);
      EXPECT_EQ(span.last, s == layout.pp - 1);
      out.push_back(span.end_layer - span.first_layer);
      next = span.end_layer;
    }
    EXPECT_EQ(next, m.layers) << text;
    return out;
  };
  EXPECT_EQ(sizes("pp=4,first=1,last=1"), (std::vector<int64_t>{1, 4, 4, 1}));
  EXPECT_EQ(sizes("pp=4,first=1"), (std::vector<int64_t>{1, 3, 3, 3}));
  EXPECT_EQ(sizes("pp=4,last=4"), (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(sizes("pp=3,first=1,last=2"), (std::vector<int64_t>{1, 7, 2}));
  EXPECT_EQ(sizes("pp=2,first=7,last=3"), (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(sizes("pp=3,first=2"), (std::vector<int64_t>{2, 4, 4}));
  EXPECT_EQ(sizes("pp=3,last=3"), (std::vector<int64_t>{3, 4, 3}));  // 7 over 2: one more on 1
  EXPECT_EQ(parse_train_layout("last=2,pp=3,first=1").to_string(), "tp=1,pp=3,dp=1,first=1,last=2");

  RunConfig c = preset_config("tiny");
  c.model.layers = 4;
  auto check = [&](const std::string& text) {
    check_train_layout(parse_train_layout(text), parse_train_layout(text).ranks(), c);
  };
  check("pp=2,first=1");
  check("pp=3,first=1,last=1");
  EXPECT_TPF_ERROR(check("first=2"), ErrorCode::invalid_argument, "give pp=2 or more");
  EXPECT_TPF_ERROR(check("pp=2,first=1,last=2"), ErrorCode::invalid_argument,
                   "first=1 and last=2 add up to 3 layers", "with pp=2 they must add up to",
                   "4 layers");
  EXPECT_TPF_ERROR(check("pp=3,first=3,last=2"), ErrorCode::invalid_argument,
                   "add up to 5 layers, more than the model's 4 layers");
  EXPECT_TPF_ERROR(check("pp=4,last=2"), ErrorCode::invalid_argument,
                   "last=2 leaves 2 of the model's 4 layers for the other 3 stages");
  EXPECT_TPF_ERROR(check("pp=2,first=0"), ErrorCode::invalid_argument, "first=0",
                   "not a size between 1");
  EXPECT_TPF_ERROR(check("pp=2,first=1,first=1"), ErrorCode::invalid_argument,
                   "'first' is given twice");
}

}  // namespace
}  // namespace tpf::testing
