// The compute model's kernel terms against kernels measured on Hopper GPUs by
// bench/gpu/hopper_kernels.py: an NVIDIA H200 (the H100-SXM's chip and compute peaks, 4.8 TB/s
// of HBM; docs/results/hopper-kernels-h200/) and an H100 SXM (docs/results/hopper-kernels-h100/).
// Kernels alone, so the model is given the published kernel rates without kInTrainingFraction.
// Checked on both: how GEMM time follows shape (every GEMM of the held-out H100 layouts, relative
// to a large GEMM, so the level of the large-GEMM rate cancels) and how the fused-attention rate
// follows size (fitted to the H200's data); on the H200: the fixed cost per GEMM and whole layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "plan/calibration.h"
#include "plan/cluster.h"
#include "plan/collective_planner.h"
#include "plan/compute_model.h"
#include "plan/layout.h"
#include "plan/model_spec.h"
#include "plan/step_model.h"

namespace tpf::plan {
namespace {

const std::filesystem::path kResults = std::filesystem::path(TPF_SOURCE_DIR) / "docs/results";
// The H200's measurements, to which the attention rate is fitted and which hold the layers.
const std::filesystem::path kH200 = kResults / "hopper-kernels-h200";

// One CSV file with a header row, as bench/gpu/hopper_kernels.py writes it (no quoting; Python's
// csv ends lines with CR LF).
class CsvTable {
 public:
  explicit CsvTable(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) ADD_FAILURE() << "cannot read " << path;
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = split(line);
    for (size_t i = 0; i < header.size(); ++i) column_[header[i]] = i;
    while (std::getline(in, line)) {
      if (!line.empty()) rows_.push_back(split(line));
    }
  }
  size_t size() const { return rows_.size(); }
  const std::string& text(size_t row, const std::string& column) const {
    return rows_.at(row).at(column_.at(column));
  }
  double number(size_t row, const std::string& column) const {
    return std::stod(text(row, column));
  }

 private:
  static std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> fields;
    std::stringstream stream(line.substr(0, line.find_last_not_of('\r') + 1));
    std::string field;
    while (std::getline(stream, field, ',')) fields.push_back(field);
    return fields;
  }
  std::map<std::string, size_t> column_;
  std::vector<std::vector<std::string>> rows_;
};

// The H100-SXM preset's kernel rates before kInTrainingFraction, with a card's HBM bandwidth.
AcceleratorSpec kernels_alone(double hbm_gbps) {
  AcceleratorSpec gpu;
  gpu.hbm_gbps = hbm_gbps;
  gpu.max_gemm_efficiency /= kInTrainingFraction;
  gpu.max_fp8_gemm_efficiency /= kInTrainingFraction;
  gpu.attention_efficiency /= kInTrainingFraction;
  return gpu;
}

// A card measured, with the bounds its measurements meet (what the model achieved when written,
// so that a change that follows the hardware less well fails).
struct MeasuredCard {
  const char* name;
  std::filesystem::path folder;
  double hbm_gbps;
  double bf16_mean, bf16_max, fp8_mean, fp8_max;  // GEMM shape errors
  double attention_mean, attention_max;
};
const MeasuredCard kCards[] = {
    // BF16 2.9 % / 14.2 %, FP8 3.0 % / 29.9 %; attention 4.3 % / 17.9 % (fitted here).
    {"H200", kH200, 4800, 0.03, 0.15, 0.035, 0.30, 0.045, 0.18},
    // BF16 2.7 % / 10.6 %, FP8 4.0 % / 18.4 %; attention 5.5 % / 15.8 % (held out: fitted on
    // the H200).
    {"H100", kResults / "hopper-kernels-h100", 3350, 0.03, 0.11, 0.045, 0.19, 0.06, 0.16},
};
const MeasuredCard& kH200Card = kCards[0];
AcceleratorSpec h200_kernels_alone() { return kernels_alone(kH200Card.hbm_gbps); }

GemmShape shape_of(const CsvTable& gemms, size_t row) {
  return {gemms.number(row, "m"), gemms.number(row, "n"), gemms.number(row, "k")};
}

struct ShapeErrors {
  size_t count = 0;
  double mean_abs = 0;
  double max_abs = 0;
};

// Each training-shape GEMM's rate relative to the median large square GEMM (4096 and up), the
// model's against the measured, as model / measured - 1.
ShapeErrors shape_errors(const CsvTable& gemms, const std::string& dtype, Precision precision,
                         const AcceleratorSpec& gpu) {
  const ComputeModel model(gpu, precision);
  std::vector<double> large;
  for (size_t r = 0; r < gemms.size(); ++r) {
    if (gemms.text(r, "dtype") == dtype && gemms.text(r, "config") == "square" &&
        gemms.number(r, "m") >= 4096) {
      large.push_back(gemms.number(r, "tflops"));
    }
  }
  const double measured_large = median(large);
  const double model_large = model.gemm_efficiency({16384, 16384, 16384});
  ShapeErrors errors;
  for (size_t r = 0; r < gemms.size(); ++r) {
    if (gemms.text(r, "dtype") != dtype || gemms.text(r, "config") == "square") continue;
    const double measured = gemms.number(r, "tflops") / measured_large;
    const double predicted = model.gemm_efficiency(shape_of(gemms, r)) / model_large;
    const double error = std::abs(predicted / measured - 1);
    errors.count += 1;
    errors.mean_abs += error;
    errors.max_abs = std::max(errors.max_abs, error);
  }
  if (errors.count > 0) errors.mean_abs /= static_cast<double>(errors.count);
  std::printf(
      "%s: %zu GEMMs, large-GEMM rate %.0f TFLOP/s measured; shape error mean %.1f %%, "
      "max %.1f %%\n",
      dtype.c_str(), errors.count, measured_large, 100 * errors.mean_abs, 100 * errors.max_abs);
  return errors;
}

// 55 GEMMs (5 per layer of 11 layouts) x 3 passes per precision, on each card. FP8's worst
// cases are the thin-K projections of TP 8 (K = 896, 1024), slower on the GPU than the roofline
// says.
TEST(PlanKernelMeasurements, GemmRateFollowsShapeAsOnHopperCards) {
  for (const MeasuredCard& card : kCards) {
    SCOPED_TRACE(card.name);
    std::printf("%s\n", card.name);
    const CsvTable gemms(card.folder / "gemm.csv");
    const AcceleratorSpec gpu = kernels_alone(card.hbm_gbps);
    const ShapeErrors bf16 = shape_errors(gemms, "bf16", Precision::bf16, gpu);
    EXPECT_EQ(bf16.count, 165u);
    EXPECT_LE(bf16.mean_abs, card.bf16_mean);
    EXPECT_LE(bf16.max_abs, card.bf16_max);
    const ShapeErrors fp8 = shape_errors(gemms, "fp8", Precision::fp8, gpu);
    EXPECT_EQ(fp8.count, 165u);
    EXPECT_LE(fp8.mean_abs, card.fp8_mean);
    EXPECT_LE(fp8.max_abs, card.fp8_max);
  }
}

// GEMMs of 256^3 and 512^3 do next to no work: what they take is the fixed cost per kernel,
// which the model assumes (5 us) and the GPU shows when launches do not bound it (graph replay).
// On the H200; the H100 gave 3.7-5.2 us but once 12 us (FP8, 512^3 forward).
TEST(PlanKernelMeasurements, FixedCostPerGemmAsOnAnH200) {
  const CsvTable gemms(kH200 / "gemm.csv");
  const AcceleratorSpec gpu = h200_kernels_alone();
  int checked = 0;
  for (size_t r = 0; r < gemms.size(); ++r) {
    if (gemms.text(r, "config") != "square" || gemms.number(r, "m") > 512) continue;
    ASSERT_EQ(gemms.text(r, "timing"), "graph");
    const double measured_us = gemms.number(r, "us");
    EXPECT_NEAR(measured_us / gpu.gemm_overhead_us, 1, 0.15)
        << gemms.text(r, "dtype") << " " << gemms.text(r, "gemm") << " " << gemms.text(r, "pass");
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

// The fused-attention rate's three parameters (the large-size rate, the keys and the query rows
// that halve it) were fitted to the H200's 29 measurements of cuDNN's kernel (least squares of
// the log error over a grid), so there this is in-sample: it checks that the preset carries the
// fit, and how close the form follows the kernel (the worst at 4 heads and 1,024 tokens, far
// below any layout of the held-out runs). The H100's are held out.
TEST(PlanKernelMeasurements, AttentionRateFollowsSizeAsOnHopperCards) {
  for (const MeasuredCard& card : kCards) {
    SCOPED_TRACE(card.name);
    const CsvTable attention(card.folder / "attention.csv");
    const AcceleratorSpec gpu = kernels_alone(card.hbm_gbps);
    const ComputeModel model(gpu, Precision::bf16);
    std::vector<double> errors;
    for (size_t r = 0; r < attention.size(); ++r) {
      if (attention.text(r, "backend") != "cudnn") continue;
      const AttentionShape shape{attention.number(r, "batch") * attention.number(r, "heads"),
                                 attention.number(r, "seq"), attention.number(r, "seq"),
                                 attention.number(r, "head_dim")};
      // The full s x s count over the time of forward + backward (3 forward passes' FLOPs).
      const double measured =
          attention.number(r, "fwd_bwd_full_count_tflops") * 1e12 / (gpu.peak_tflops * 1e12);
      const double predicted = 2 * model.attention_efficiency(shape);  // full count: twice
      errors.push_back(std::abs(predicted / measured - 1));
    }
    ASSERT_EQ(errors.size(), 29u);
    double mean = 0;
    for (double e : errors) mean += e;
    mean /= static_cast<double>(errors.size());
    const double worst = *std::max_element(errors.begin(), errors.end());
    std::printf("%s fused attention: %zu shapes, error mean %.1f %%, max %.1f %%\n", card.name,
                errors.size(), 100 * mean, 100 * worst);
    EXPECT_LE(mean, card.attention_mean);
    EXPECT_LE(worst, card.attention_max);
  }
}

// Whole GPT layers (LayerNorm, biases, GELU, dropout; tp = 1, one sequence of 4,096 tokens,
// 128-wide heads) forward + backward in torch, eager, against the planner's compute per layer
// for the same model, kernel rates alone: how the GEMMs, attention and element-wise terms add up
// across widths 2,048-8,192. Measured / predicted is 1.12, 1.13 and 1.17: the model keeps the
// widths' relative cost within 5 %, and the published GEMM level it starts from is above what
// the card sustains at its power cap (PlanKernelMeasurements.GemmRateFollowsShapeAsOnHopperCards'
// large-GEMM rate).
TEST(PlanKernelMeasurements, GptLayerAsOnAnH200) {
  const CsvTable layers(kH200 / "layer.csv");
  ClusterSpec cluster = cluster_preset("dgx-h100", 8);
  cluster.gpu = h200_kernels_alone();
  CollectivePlanner planner(cluster);
  std::vector<double> ratios;
  for (size_t r = 0; r < layers.size(); ++r) {
    if (layers.text(r, "variant") != "full") continue;
    ModelSpec model;
    model.name = layers.text(r, "config");
    model.layers = 32;
    model.hidden = static_cast<int>(layers.number(r, "hidden"));
    model.heads = static_cast<int>(layers.number(r, "heads"));
    model.ffn_hidden = static_cast<int>(layers.number(r, "mlp"));
    model.seq_len = static_cast<int>(layers.number(r, "seq"));
    model.vocab = 128;  // the output layer next to nothing beside 32 layers
    // One micro-batch per GPU; DP's communication is not part of compute_s.
    const StepEstimate e = estimate_step(model, parse_layout("tp=1,pp=1,dp=8,mb=1,gb=8"), planner);
    const double predicted_us = e.breakdown.compute_s / model.layers * 1e6;
    ratios.push_back(layers.number(r, "fwd_bwd_us") / predicted_us);
    std::printf("%s: %.0f us measured, %.0f us predicted per layer\n", model.name.c_str(),
                layers.number(r, "fwd_bwd_us"), predicted_us);
  }
  ASSERT_EQ(ratios.size(), 3u);
  const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
  EXPECT_LE(*high / *low, 1.06);
  EXPECT_GE(*low, 1.05);
  EXPECT_LE(*high, 1.25);
}

}  // namespace
}  // namespace tpf::plan
