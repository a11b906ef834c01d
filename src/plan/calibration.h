// Calibration of the shared-memory link class (coll::ShmLinkCost) from `tpf bench all_reduce`
// measurements: read the benchmark's JSON files, fit the link constants by least squares on
// relative error, and measure how well the fitted model predicts points it was not fitted on.
// Used by `tpf plan calibrate` (apps/cli/plan_calibrate_cmd.cc) and by the planner's validation.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "coll/cost_model.h"

namespace tpf::plan {

// One all-reduce timing from `tpf bench`: the time of one call, max over ranks.
struct ShmMeasurement {
  coll::AllReduceAlgorithm algorithm = coll::AllReduceAlgorithm::one_shot;
  int nranks = 2;
  size_t bytes = 0;
  int excess_ranks = 0;  // ranks beyond the cores (0 = a core each; the fabric's own definition)
  bool in_place = false;
  double measured_us = 0;
  std::string source;  // "FILE rows[K].oop", for tables and messages
};

// What one `tpf bench all_reduce --json` file holds. Besides the rows, the calibration needs the
// top-level keys "algorithm" ("one_shot" | "two_shot", what TPF_ALLREDUCE_ALGO forced),
// "oversubscribed" (bool), "slot_bytes" (integer) and, where oversubscribed, "cpus" (the cores
// the job had, TPF_CPUS): the excess ranks are max(0, nranks - cpus). tpf bench --json writes
// them all (an "automatic" algorithm is refused: the fit needs to know which one ran).
struct BenchFile {
  std::string path;
  size_t slot_bytes = 0;
  std::vector<ShmMeasurement> measurements;  // out-of-place and in-place rows
  std::vector<std::string> notes;            // rows skipped or re-labelled, and why
};

// Rows of at most this many bytes go through eager messages, not the staged algorithms
// (kEagerAllReduceBytes in coll/eager.cc); the reader skips them.
inline constexpr size_t kEagerAllReduceMaxBytes = 256;

// Throws tpf::Error(invalid_argument) naming the file and what is wrong (unreadable file,
// malformed JSON, a missing or mistyped key, a collective other than all_reduce, a row with wrong
// results or a non-positive time). A forced one-shot above one slot runs two-shot in the fabric
// (coll::choose_all_reduce), so such rows are labelled two_shot, with a note.
BenchFile parse_bench_json(const std::string& text, const std::string& path);
BenchFile read_bench_file(const std::string& path);

// The median of `values` (0 for none).
double median(std::vector<double> values);

// One measurement per point (N, algorithm, excess ranks, size, placement): where several runs
// measured the same point, their median, in the order of the points' first runs. On a shared
// machine a run can be slowed by other processes (a rank waits out a scheduler time slice), but
// whole runs can also be faster than the rest (on the 2-core development VM one sweep in five ran
// 2x faster at every size), so the minimum would mix machine states from point to point; the
// median keeps the typical one.
std::vector<ShmMeasurement> median_of_repeats(const std::vector<ShmMeasurement>& runs);

// The same for any measurement type with `measured_us` and `source`: `same_point(a, b)` says
// whether two runs measured one point.
template <class Measurement, class SamePoint>
std::vector<Measurement> median_of_repeats_by(const std::vector<Measurement>& runs,
                                              SamePoint&& same_point) {
  std::vector<Measurement> out;
  std::vector<std::vector<double>> times;
  for (const Measurement& m : runs) {
    size_t i = 0;
    while (i < out.size() && !same_point(out[i], m)) ++i;  // a few hundred points at most
    if (i == out.size()) {
      out.push_back(m);
      times.emplace_back();
    }
    times[i].push_back(m.measured_us);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (times[i].size() > 1) {
      out[i].measured_us = median(times[i]);
      out[i].source += " (median of " + std::to_string(times[i].size()) + " runs)";
    }
  }
  return out;
}

// The ShmLinkCost parameters in the order of the fit.
enum class ShmParameter { step_us, step_us_per_excess_rank, copy_gbps, reduce_gbps };
const char* to_string(ShmParameter parameter);

struct ShmFit {
  coll::ShmLinkCost cost;
  // Parameters the training set determines; the others keep the prior's values (e.g. the
  // step per excess rank when every training point had a core per rank).
  std::vector<ShmParameter> fitted;
  // True when the unconstrained least-squares solution had a coefficient <= 0: the result is then
  // the best fit with that coefficient at 0 (a rate of 0 GB/s reads "not a bottleneck", as in
  // coll::LinkClass), and `notes` gives the unconstrained values.
  bool constrained = false;
  std::vector<std::string> notes;
  size_t points = 0;
  double train_median_rel_error = 0;  // |predicted - measured| / measured over the training set
  double train_max_rel_error = 0;
};

// Fits ShmLinkCost to `training` so that sum(((predicted - measured) / measured)^2) is least:
// small and large messages weigh alike. The model (coll::predict_all_reduce_us) is linear in
// (step_us, step_us_per_excess_rank, 1 / copy_gbps, 1 / reduce_gbps) once the pipeline
// chunk counts are fixed by `slot_bytes`, so this is a small linear least-squares problem, solved
// by QR. Throws tpf::Error(invalid_argument) when the training set is empty or cannot separate the
// parameters (e.g. only one algorithm at one rank count: copy and reduce rates are then
// confounded).
ShmFit fit_shm_link_cost(const std::vector<ShmMeasurement>& training, size_t slot_bytes,
                         const coll::ShmLinkCost& prior = {});

// A model's prediction of one measurement (of any link class).
template <class Measurement>
struct PointErrorOf {
  Measurement measurement;
  double predicted_us = 0;
  double rel_error = 0;  // (predicted - measured) / measured, signed
};

template <class Measurement>
struct EvaluationOf {
  std::vector<PointErrorOf<Measurement>> points;  // in the order of the measurements
  double median_abs_rel_error = 0;                // 0 when there are no points
  double max_abs_rel_error = 0;
  size_t max_index = 0;  // the point with the largest |rel_error|
};

// `predict(m)` (microseconds) against each measurement's `measured_us`.
template <class Measurement, class Predict>
EvaluationOf<Measurement> evaluate_with(const std::vector<Measurement>& measurements,
                                        Predict&& predict) {
  EvaluationOf<Measurement> e;
  std::vector<double> abs_errors;
  for (const Measurement& m : measurements) {
    PointErrorOf<Measurement> p;
    p.measurement = m;
    p.predicted_us = predict(m);
    p.rel_error = (p.predicted_us - m.measured_us) / m.measured_us;
    const double a = p.rel_error < 0 ? -p.rel_error : p.rel_error;
    if (e.points.empty() || a > e.max_abs_rel_error) {
      e.max_abs_rel_error = a;
      e.max_index = e.points.size();
    }
    abs_errors.push_back(a);
    e.points.push_back(std::move(p));
  }
  e.median_abs_rel_error = median(std::move(abs_errors));
  return e;
}

using PointError = PointErrorOf<ShmMeasurement>;
using Evaluation = EvaluationOf<ShmMeasurement>;

Evaluation evaluate(const coll::ShmLinkCost& cost, const std::vector<ShmMeasurement>& measurements,
                    size_t slot_bytes);

}  // namespace tpf::plan
