// Calibration of the shared-memory link class: exact recovery of known constants, stability under
// measurement noise, the positivity and identifiability guards, bench JSON errors, and the error
// of the fit on the measurements saved from this machine (docs/results/calibration).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "plan/calibration.h"
#include "support/expect_tpf_error.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

using coll::AllReduceAlgorithm;
using coll::ShmLinkCost;

constexpr size_t kSlotBytes = size_t{256} << 10;

ShmLinkCost known_cost() {
  ShmLinkCost c;
  c.step_us = 0.8;
  c.step_us_per_excess_rank = 4.5;
  c.copy_gbps = 12.0;
  c.reduce_gbps = 30.0;
  return c;
}

// Every configuration calibrate.sh measures on 2 cores: N = 2 (a core each), 3 and 4 (1 and 2
// ranks beyond the cores), both algorithms, 1 KiB .. 4 MiB (one-shot up to one slot), timed by the
// model itself.
std::vector<ShmMeasurement> synthetic(const ShmLinkCost& cost) {
  std::vector<ShmMeasurement> out;
  for (int n : {2, 3, 4}) {
    for (AllReduceAlgorithm a : {AllReduceAlgorithm::one_shot, AllReduceAlgorithm::two_shot}) {
      const size_t max_bytes = a == AllReduceAlgorithm::one_shot ? kSlotBytes : size_t{4} << 20;
      for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 2) {
        ShmMeasurement m;
        m.algorithm = a;
        m.nranks = n;
        m.bytes = bytes;
        m.excess_ranks = n - 2;
        m.measured_us = coll::predict_all_reduce_us(a, bytes, n, m.excess_ranks, kSlotBytes, cost);
        m.source = "synthetic";
        out.push_back(m);
      }
    }
  }
  return out;
}

// calibrate's default training set: N = 2, at most 64 KiB.
std::vector<ShmMeasurement> default_training(const std::vector<ShmMeasurement>& all) {
  std::vector<ShmMeasurement> out;
  for (const ShmMeasurement& m : all) {
    if (m.nranks == 2 && m.bytes <= (size_t{64} << 10)) out.push_back(m);
  }
  return out;
}

void expect_relative_near(double actual, double expected, double tolerance, const char* what) {
  EXPECT_LE(std::abs(actual - expected), tolerance * std::abs(expected))
      << what << ": " << actual << " against " << expected;
}

TEST(PlanCalibration, RecoversKnownConstantsExactly) {
  const ShmLinkCost truth = known_cost();
  const ShmFit fit = fit_shm_link_cost(synthetic(truth), kSlotBytes);
  EXPECT_FALSE(fit.constrained);
  EXPECT_EQ(fit.fitted.size(), 4u);
  expect_relative_near(fit.cost.step_us, truth.step_us, 1e-6, "step_us");
  expect_relative_near(fit.cost.step_us_per_excess_rank, truth.step_us_per_excess_rank, 1e-6,
                       "step per excess rank");
  expect_relative_near(fit.cost.copy_gbps, truth.copy_gbps, 1e-6, "copy_gbps");
  expect_relative_near(fit.cost.reduce_gbps, truth.reduce_gbps, 1e-6, "reduce_gbps");
  EXPECT_LT(fit.train_max_rel_error, 1e-9);
}

TEST(PlanCalibration, ParametersWithoutTrainingPointsKeepThePrior) {
  const ShmLinkCost truth = known_cost();
  ShmLinkCost prior;
  prior.step_us_per_excess_rank = 7.25;
  const ShmFit fit = fit_shm_link_cost(default_training(synthetic(truth)), kSlotBytes, prior);
  EXPECT_EQ(fit.fitted.size(), 3u);
  EXPECT_EQ(fit.cost.step_us_per_excess_rank, 7.25);
  ASSERT_FALSE(fit.notes.empty());
  EXPECT_NE(fit.notes[0].find("step_us_per_excess_rank not fitted"), std::string::npos);
  expect_relative_near(fit.cost.step_us, truth.step_us, 1e-6, "step_us");
  expect_relative_near(fit.cost.copy_gbps, truth.copy_gbps, 1e-6, "copy_gbps");
  expect_relative_near(fit.cost.reduce_gbps, truth.reduce_gbps, 1e-6, "reduce_gbps");
  // Held out at N = 2 (the larger sizes, pipelined two-shot included) the fit is exact too.
  std::vector<ShmMeasurement> held;
  for (const ShmMeasurement& m : synthetic(truth)) {
    if (m.nranks == 2 && m.bytes > (size_t{64} << 10)) held.push_back(m);
  }
  const Evaluation e = evaluate(fit.cost, held, kSlotBytes);
  EXPECT_EQ(e.points.size(), held.size());
  EXPECT_LT(e.max_abs_rel_error, 1e-9);
}

// Multiplicative noise, uniform in [-amplitude, amplitude], from a fixed 64-bit LCG (std::
// distributions differ between standard libraries; this keeps the test identical everywhere).
std::vector<ShmMeasurement> with_noise(std::vector<ShmMeasurement> ms, double amplitude,
                                       uint64_t seed) {
  for (ShmMeasurement& m : ms) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(seed >> 11) / static_cast<double>(uint64_t{1} << 53);
    m.measured_us *= 1 + amplitude * (2 * u - 1);
  }
  return ms;
}

TEST(PlanCalibration, NoisyMeasurementsGiveAStableFit) {
  const ShmLinkCost truth = known_cost();
  const std::vector<ShmMeasurement> clean = synthetic(truth);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<ShmMeasurement> noisy = with_noise(clean, 0.05, seed);
    const ShmFit fit = fit_shm_link_cost(noisy, kSlotBytes);
    EXPECT_FALSE(fit.constrained);
    // 5 % noise on 66 points moves no constant by more than 15 %, and the fitted model predicts
    // the noise-free times to within a few per cent.
    expect_relative_near(fit.cost.step_us, truth.step_us, 0.15, "step_us");
    expect_relative_near(fit.cost.step_us_per_excess_rank, truth.step_us_per_excess_rank, 0.15,
                         "step per excess rank");
    expect_relative_near(fit.cost.copy_gbps, truth.copy_gbps, 0.15, "copy_gbps");
    expect_relative_near(fit.cost.reduce_gbps, truth.reduce_gbps, 0.15, "reduce_gbps");
    const Evaluation e = evaluate(fit.cost, clean, kSlotBytes);
    EXPECT_LT(e.median_abs_rel_error, 0.02);
    EXPECT_LT(e.max_abs_rel_error, 0.05);
    EXPECT_LE(fit.train_max_rel_error, 0.12);
  }
}

TEST(PlanCalibration, NonPositiveCoefficientIsReportedAndPinnedAtZero) {
  // Times that do not grow with size at all: the unconstrained fit wants negative rates.
  std::vector<ShmMeasurement> ms = default_training(synthetic(known_cost()));
  for (ShmMeasurement& m : ms) {
    m.measured_us = (m.algorithm == AllReduceAlgorithm::one_shot ? 3.0 : 6.0) *
                    (1 - 0.2 * std::log2(static_cast<double>(m.bytes) / 1024) / 6);
  }
  const ShmFit fit = fit_shm_link_cost(ms, kSlotBytes);
  EXPECT_TRUE(fit.constrained);
  EXPECT_GE(fit.cost.step_us, 0);
  EXPECT_GE(fit.cost.copy_gbps, 0);
  EXPECT_GE(fit.cost.reduce_gbps, 0);
  bool reported = false;
  for (const std::string& note : fit.notes) {
    reported =
        reported || note.find("unconstrained fit has a coefficient <= 0") != std::string::npos;
  }
  EXPECT_TRUE(reported);
}

TEST(PlanCalibration, TrainingSetThatCannotSeparateParametersIsAnError) {
  std::vector<ShmMeasurement> one_shot_only;
  for (const ShmMeasurement& m : default_training(synthetic(known_cost()))) {
    if (m.algorithm == AllReduceAlgorithm::one_shot) one_shot_only.push_back(m);
  }
  EXPECT_TPF_ERROR(fit_shm_link_cost(one_shot_only, kSlotBytes), ErrorCode::invalid_argument,
                   "cannot separate", "one_shot and two_shot");
  EXPECT_TPF_ERROR(fit_shm_link_cost({}, kSlotBytes), ErrorCode::invalid_argument,
                   "no training measurements");
}

// ---- bench JSON ---------------------------------------------------------------------------------

std::string bench_json(const std::string& meta, const std::string& rows) {
  return "{" + meta +
         "\"collective\":\"all_reduce\",\"nranks\":2,\"dtype\":\"f32\",\"op\":\"sum\",\"root\":-1,"
         "\"iters\":20,\"warmup\":5,\"avg_busbw\":1.0,\"rows\":[" +
         rows + "]}";
}

const std::string kMeta =
    "\"algorithm\":\"one_shot\",\"oversubscribed\":false,\"slot_bytes\":262144,";
const std::string kRow =
    "{\"bytes\":4096,\"count\":1024,\"oop\":{\"time_us\":1.5,\"algbw\":2.7,\"busbw\":2.7,"
    "\"wrong\":0},\"ip\":{\"time_us\":1.6,\"algbw\":2.5,\"busbw\":2.5,\"wrong\":null}}";

TEST(PlanCalibration, RepeatedRunsOfOnePointGiveTheirMedian) {
  std::vector<ShmMeasurement> runs = default_training(synthetic(known_cost()));
  const size_t points = runs.size();
  std::vector<ShmMeasurement> more = runs;
  for (double factor : {2.0, 0.5, 1.1, 3.0}) {
    for (ShmMeasurement m : more) {
      m.measured_us *= factor;
      runs.push_back(m);
    }
  }
  const std::vector<ShmMeasurement> median = median_of_repeats(runs);
  ASSERT_EQ(median.size(), points);
  for (size_t i = 0; i < points; ++i) {
    EXPECT_DOUBLE_EQ(median[i].measured_us, more[i].measured_us * 1.1);  // of 0.5 1 1.1 2 3
    EXPECT_EQ(median[i].bytes, more[i].bytes);
  }
}

TEST(PlanCalibrationBenchJson, ReadsRowsOfBothPlacements) {
  const std::string eager =
      "{\"bytes\":256,\"count\":64,\"oop\":{\"time_us\":0.5,\"algbw\":0,\"busbw\":0,\"wrong\":0},"
      "\"ip\":null}";
  const std::string above_slot =
      "{\"bytes\":524288,\"count\":131072,\"oop\":{\"time_us\":60,\"algbw\":0,\"busbw\":0,"
      "\"wrong\":0},\"ip\":null}";
  const BenchFile f =
      parse_bench_json(bench_json(kMeta, eager + "," + kRow + "," + above_slot), "b.json");
  EXPECT_EQ(f.slot_bytes, kSlotBytes);
  ASSERT_EQ(f.measurements.size(), 3u);  // the eager row is skipped
  EXPECT_EQ(f.measurements[0].bytes, 4096u);
  EXPECT_FALSE(f.measurements[0].in_place);
  EXPECT_EQ(f.measurements[0].measured_us, 1.5);
  EXPECT_TRUE(f.measurements[1].in_place);
  EXPECT_EQ(f.measurements[1].measured_us, 1.6);
  EXPECT_EQ(f.measurements[0].algorithm, AllReduceAlgorithm::one_shot);
  // A forced one-shot above one slot runs two-shot in the fabric.
  EXPECT_EQ(f.measurements[2].algorithm, AllReduceAlgorithm::two_shot);
  EXPECT_EQ(f.notes.size(), 2u);
  for (const ShmMeasurement& m : f.measurements) EXPECT_EQ(m.excess_ranks, 0);
}

TEST(PlanCalibrationBenchJson, ExcessRanksComeFromTheCoresTheRunHad) {
  // bench_json runs 2 ranks: on 1 core, one of them is beyond it.
  const BenchFile f = parse_bench_json(
      bench_json("\"algorithm\":\"one_shot\",\"oversubscribed\":true,\"slot_bytes\":262144,"
                 "\"cpus\":1,",
                 kRow),
      "b.json");
  ASSERT_EQ(f.measurements.size(), 2u);
  EXPECT_EQ(f.measurements[0].excess_ranks, 1);
  EXPECT_EQ(f.measurements[1].excess_ranks, 1);
  const BenchFile with_cores = parse_bench_json(
      bench_json("\"algorithm\":\"one_shot\",\"oversubscribed\":false,\"slot_bytes\":262144,"
                 "\"cpus\":2,",
                 kRow),
      "b.json");
  EXPECT_EQ(with_cores.measurements[0].excess_ranks, 0);
}

TEST(PlanCalibrationBenchJson, MalformedInputNamesTheFileAndTheProblem) {
  const auto bad = [](const std::string& text, std::vector<std::string> parts) {
    SCOPED_TRACE(text);
    try {
      parse_bench_json(text, "bad.json");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      parts.push_back("bad.json");
      for (const std::string& part : parts) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "'" << part << "' is not in: " << e.what();
      }
    }
  };
  bad("{\"collective\":", {"invalid JSON"});
  bad("[1, 2]", {"top level is array"});
  bad(bench_json("", kRow), {"no key 'algorithm'", "calibrate.sh"});
  bad(bench_json("\"algorithm\":\"ring\",\"oversubscribed\":false,\"slot_bytes\":262144,", kRow),
      {"'algorithm' is 'ring'", "one_shot or two_shot"});
  bad(bench_json("\"algorithm\":\"one_shot\",\"oversubscribed\":\"no\",\"slot_bytes\":262144,",
                 kRow),
      {"'oversubscribed'", "bool"});
  const std::string oversubscribed =
      "\"algorithm\":\"one_shot\",\"oversubscribed\":true,\"slot_bytes\":262144,";
  bad(bench_json(oversubscribed, kRow), {"no key 'cpus'", "oversubscribed run needs the cores"});
  bad(bench_json(oversubscribed + "\"cpus\":0,", kRow), {"'cpus' is 0"});
  bad(bench_json(oversubscribed + "\"cpus\":\"1\",", kRow), {"'cpus'"});
  bad(bench_json(oversubscribed + "\"cpus\":2,", kRow),
      {"'oversubscribed' is true", "0 ranks beyond the cores"});
  bad(bench_json(kMeta + "\"cpus\":1,", kRow),
      {"'oversubscribed' is false", "1 ranks beyond the cores"});
  bad(bench_json(kMeta, ""), {"'rows' is empty"});
  bad(bench_json(kMeta, "{\"bytes\":\"4K\",\"oop\":{\"time_us\":1,\"wrong\":0}}"),
      {"rows[0].bytes"});
  bad(bench_json(kMeta, "{\"bytes\":4096,\"oop\":{\"time_us\":1,\"wrong\":3}}"),
      {"rows[0].oop has 3 wrong elements"});
  bad(bench_json(kMeta, "{\"bytes\":4096,\"oop\":{\"time_us\":0,\"wrong\":0}}"),
      {"rows[0].oop.time_us", "positive"});
  bad(bench_json(kMeta, "{\"bytes\":4096,\"oop\":{\"wrong\":0}}"),
      {"rows[0].oop has no key 'time_us'"});
  bad(bench_json(kMeta, "{\"bytes\":4096,\"oop\":null,\"ip\":null}"),
      {"rows[0] has neither an out-of-place (oop) nor an in-place (ip) time"});
  bad(bench_json(kMeta, "{\"bytes\":4096,\"ip\":{\"time_us\":1,\"wrong\":0}}"),
      {"rows[0]", "no key 'oop'"});
  std::string gather = bench_json(kMeta, kRow);
  gather.replace(gather.find("all_reduce"), 10, "all_gather");
  bad(gather, {"'collective' is 'all_gather'"});
  EXPECT_TPF_ERROR(read_bench_file("/nonexistent/calibration.json"), ErrorCode::invalid_argument,
                   "cannot read bench results '/nonexistent/calibration.json'");
}

// ---- the measurements of this machine -----------------------------------------------------------

TEST(PlanCalibration, SavedMeasurementsOfThisMachinePredictHeldOutPoints) {
  const std::filesystem::path dir =
      std::filesystem::path(TPF_SOURCE_DIR) / "docs/results/calibration";
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  ASSERT_GE(paths.size(), 6u) << "bench/plan/calibrate.sh docs/results/calibration writes them";
  // As `tpf plan calibrate` does: out-of-place rows, the median of the runs of each point,
  // trained on N = 2 up to 64 KiB; held out: larger sizes at N = 2, and N = 3 and 4.
  std::vector<ShmMeasurement> runs;
  size_t slot = 0;
  for (const std::string& p : paths) {
    BenchFile f = read_bench_file(p);
    slot = f.slot_bytes;
    for (const ShmMeasurement& m : f.measurements) {
      if (!m.in_place) runs.push_back(m);
    }
  }
  const std::vector<ShmMeasurement> points = median_of_repeats(runs);
  auto split = [&](int max_train_ranks, std::vector<ShmMeasurement>& training,
                   std::vector<ShmMeasurement>& held) {
    for (const ShmMeasurement& m : points) {
      const bool train = m.nranks <= max_train_ranks && m.bytes <= (size_t{64} << 10);
      (train ? training : held).push_back(m);
    }
  };

  // The default split: trained at N = 2 only; the N = 2 points above 64 KiB are held out.
  std::vector<ShmMeasurement> training;
  std::vector<ShmMeasurement> held;
  split(2, training, held);
  ASSERT_FALSE(training.empty());
  const ShmFit fit = fit_shm_link_cost(training, slot);
  EXPECT_FALSE(fit.constrained);
  std::vector<ShmMeasurement> held_n2;
  for (const ShmMeasurement& m : held) {
    if (m.nranks == 2) held_n2.push_back(m);
  }
  ASSERT_FALSE(held_n2.empty());
  const Evaluation n2 = evaluate(fit.cost, held_n2, slot);
  // The errors docs/plan.md states, with a little room (saved run: training median 7.3 %, held-out
  // N = 2 median 8.6 %).
  EXPECT_LT(fit.train_median_rel_error, 0.10);
  EXPECT_LT(n2.median_abs_rel_error, 0.10);
  // N = 3 and 4 (1 and 2 ranks beyond the 2 cores) with the default step per excess rank, which
  // is not fitted here: saved run median 8.7 %, max 37.5 % (one-shot at 256 KiB, N = 4). Not an
  // independent check: the default (12 us) was rounded from the N = 2, 3 fit below (11.55 us).
  // The per-rank model it replaced (10 us x N when oversubscribed) was off by 53 % (median).
  std::vector<ShmMeasurement> held_n34;
  for (const ShmMeasurement& m : held) {
    if (m.nranks > 2) held_n34.push_back(m);
  }
  ASSERT_FALSE(held_n34.empty());
  const Evaluation n34 = evaluate(fit.cost, held_n34, slot);
  EXPECT_LT(n34.median_abs_rel_error, 0.11);
  EXPECT_LT(n34.max_abs_rel_error, 0.42);

  // Trained at N = 2 and 3 (the step per excess rank is fitted too: 11.55 us): everything else
  // held out. Saved run: median 11.3 %, max 37.2 % over all 38; N = 4 alone median 11.1 % (the
  // per-rank model: 25.4 % and 34.7 %).
  std::vector<ShmMeasurement> training23;
  std::vector<ShmMeasurement> held23;
  split(3, training23, held23);
  const ShmFit fit23 = fit_shm_link_cost(training23, slot);
  EXPECT_FALSE(fit23.constrained);
  EXPECT_EQ(fit23.fitted.size(), 4u);
  EXPECT_GT(fit23.cost.step_us_per_excess_rank, 10.5);
  EXPECT_LT(fit23.cost.step_us_per_excess_rank, 12.5);
  const Evaluation e23 = evaluate(fit23.cost, held23, slot);
  EXPECT_LT(e23.median_abs_rel_error, 0.14);
  EXPECT_LT(e23.max_abs_rel_error, 0.42);
  std::vector<ShmMeasurement> held23_n4;
  for (const ShmMeasurement& m : held23) {
    if (m.nranks == 4) held23_n4.push_back(m);
  }
  ASSERT_FALSE(held23_n4.empty());
  EXPECT_LT(evaluate(fit23.cost, held23_n4, slot).median_abs_rel_error, 0.14);
}

}  // namespace
}  // namespace tpf::plan
