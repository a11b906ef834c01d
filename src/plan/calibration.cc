#include "plan/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "coll/alpha_beta.h"
#include "formats/json.h"
#include "formats/text_files.h"
#include "plan/bench_json.h"
#include "plan/least_squares.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

constexpr int kParams = 4;
using Row = std::array<double, kParams>;

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

coll::AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name,
                                                    const std::string& path) {
  if (auto algorithm = coll::parse_all_reduce_algorithm(name)) return *algorithm;
  fail(path + ": 'algorithm' is '" + name + "': expected one_shot or two_shot");
}

// ---- Least squares ------------------------------------------------------------------------------

// Predicted microseconds = design_row . (step_us, step_us_per_excess_rank, 1 / copy_gbps,
// 1 / reduce_gbps): the terms of coll::predict_all_reduce_us, taken from the same traffic counts.
Row design_row(const ShmMeasurement& m, size_t slot_bytes) {
  const double b = static_cast<double>(m.bytes);
  const bool one_shot = m.algorithm == coll::AllReduceAlgorithm::one_shot;
  double chunks = 1;
  if (!one_shot) {
    const double chunk_bytes =
        static_cast<double>(coll::two_shot_chunk_elems(slot_bytes, 1, m.nranks));
    chunks = std::max(1.0, std::ceil(b / chunk_bytes));
  }
  const coll::StepTraffic t =
      coll::traffic_of(coll::Collective::all_reduce,
                       one_shot ? coll::Algorithm::one_shot : coll::Algorithm::two_shot, b,
                       m.nranks, /*staged=*/true, chunks);
  // The shared-memory link class has no port term (peers' slots are read in place), so wire bytes
  // cost nothing; transfer time is bytes / (gbps * 1e3) microseconds.
  Row row{};
  row[0] = t.steps;
  row[1] = t.steps * m.excess_ranks;
  row[2] = t.staged_bytes * 1e-3;
  row[3] = t.reduced_bytes * 1e-3;
  return row;
}

constexpr ShmParameter kParameters[kParams] = {ShmParameter::step_us,
                                               ShmParameter::step_us_per_excess_rank,
                                               ShmParameter::copy_gbps, ShmParameter::reduce_gbps};

// The fitted value in the unit the model uses (rates are fitted as their inverse).
std::string describe(int p, double x) {
  std::ostringstream os;
  if (p >= 2) {
    os << "1/" << to_string(kParameters[p]) << " = " << x << " ns/B";
  } else {
    os << to_string(kParameters[p]) << " = " << x << " us";
  }
  return os.str();
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

std::vector<ShmMeasurement> median_of_repeats(const std::vector<ShmMeasurement>& runs) {
  return median_of_repeats_by(runs, [](const ShmMeasurement& a, const ShmMeasurement& b) {
    return a.nranks == b.nranks && a.algorithm == b.algorithm && a.excess_ranks == b.excess_ranks &&
           a.bytes == b.bytes && a.in_place == b.in_place;
  });
}

const char* to_string(ShmParameter parameter) {
  switch (parameter) {
    case ShmParameter::step_us: return "step_us";
    case ShmParameter::step_us_per_excess_rank: return "step_us_per_excess_rank";
    case ShmParameter::copy_gbps: return "copy_gbps";
    case ShmParameter::reduce_gbps: return "reduce_gbps";
  }
  return "?";
}

BenchFile parse_bench_json(const std::string& text, const std::string& path) {
  const json::Value root = parse_bench_object(text, path);
  const std::string top;  // the top level
  const std::string collective = get_string(root, "collective", top, path);
  if (collective != "all_reduce") {
    fail(path + ": 'collective' is '" + collective +
         "': the shared-memory link class is fitted from all_reduce runs only");
  }
  const int64_t nranks = get_int(root, "nranks", top, path);
  if (nranks < 2) {
    fail(path + ": 'nranks' is " + std::to_string(nranks) +
         ": an all-reduce of one rank moves nothing; measure with tpf run -n 2 or more");
  }
  const std::string why_key =
      "tpf bench --json records it (\"algorithm\": what TPF_ALLREDUCE_ALGO forced, "
      "\"oversubscribed\", \"slot_bytes\", \"cpus\"): measure with bench/plan/calibrate.sh, "
      "or tpf bench all_reduce --json with TPF_ALLREDUCE_ALGO set";
  const std::string algorithm = get_string(root, "algorithm", top, path, why_key);
  BenchFile file;
  file.path = path;
  const coll::AllReduceAlgorithm forced = parse_all_reduce_algorithm(algorithm, path);
  const bool oversubscribed = get_bool(root, "oversubscribed", top, path, why_key);
  // The step cost grows with the ranks beyond the cores, so an oversubscribed run needs the core
  // count; where a file gives it without being oversubscribed, the two must agree.
  int excess_ranks = 0;
  if (oversubscribed || root.find("cpus") != nullptr) {
    const int64_t cpus = get_int(root, "cpus", top, path,
                                 "an oversubscribed run needs the cores it had (TPF_CPUS) to "
                                 "count the ranks beyond them; tpf bench --json records it");
    if (cpus < 1) fail(path + ": 'cpus' is " + std::to_string(cpus) + ", expected >= 1");
    excess_ranks = static_cast<int>(std::max<int64_t>(0, nranks - cpus));
    if (oversubscribed != (excess_ranks > 0)) {
      fail(path + ": 'oversubscribed' is " + (oversubscribed ? "true" : "false") + " but " +
           std::to_string(nranks) + " ranks on " + std::to_string(cpus) + " cpus leave " +
           std::to_string(excess_ranks) + " ranks beyond the cores");
    }
  }
  const int64_t slot = get_int(root, "slot_bytes", top, path, why_key);
  if (slot <= 0) fail(path + ": 'slot_bytes' is " + std::to_string(slot) + ", expected > 0");
  file.slot_bytes = static_cast<size_t>(slot);

  const json::Array& array = rows_of(root, path);
  size_t eager_rows = 0;
  size_t relabelled = 0;
  for (size_t r = 0; r < array.size(); ++r) {
    const std::string where = "rows[" + std::to_string(r) + "]";
    const json::Value& row = array[r];
    if (!row.is_object()) {
      fail(path + ": " + where + " is " + json::type_name(row.type()) + ", expected an object");
    }
    const int64_t bytes = get_int(row, "bytes", where, path);
    if (bytes <= 0) {
      fail(path + ": " + where + ".bytes is " + std::to_string(bytes) + ", expected > 0");
    }
    if (static_cast<size_t>(bytes) <= kEagerAllReduceMaxBytes) {
      ++eager_rows;
      continue;
    }
    ShmMeasurement m;
    m.algorithm = forced;
    if (forced == coll::AllReduceAlgorithm::one_shot &&
        static_cast<size_t>(bytes) > file.slot_bytes) {
      m.algorithm = coll::AllReduceAlgorithm::two_shot;  // what the fabric runs (choose_all_reduce)
      ++relabelled;
    }
    m.nranks = static_cast<int>(nranks);
    m.bytes = static_cast<size_t>(bytes);
    m.excess_ranks = excess_ranks;
    for (const PlacementTime& t : row_times_us(row, where, path)) {
      m.in_place = t.in_place;
      m.measured_us = t.us;
      m.source = path + " " + t.where;
      file.measurements.push_back(m);
    }
  }
  if (eager_rows > 0) {
    file.notes.push_back(path + ": skipped " + std::to_string(eager_rows) +
                         " rows of <= 256 B (eager messages, not the staged algorithms)");
  }
  if (relabelled > 0) {
    file.notes.push_back(path + ": " + std::to_string(relabelled) +
                         " rows above one slot ran two_shot although one_shot was forced");
  }
  return file;
}

BenchFile read_bench_file(const std::string& path) {
  return parse_bench_json(read_text_file(path, "bench results"), path);
}

ShmFit fit_shm_link_cost(const std::vector<ShmMeasurement>& training, size_t slot_bytes,
                         const coll::ShmLinkCost& prior) {
  if (training.empty()) fail("calibration: no training measurements");
  if (slot_bytes == 0) fail("calibration: slot_bytes is 0");
  std::vector<Row> rows;
  std::vector<double> measured;
  for (const ShmMeasurement& m : training) {
    if (!(m.measured_us > 0) || m.nranks < 2) {
      fail("calibration: measurement " + m.source + " has time " + std::to_string(m.measured_us) +
           " us and " + std::to_string(m.nranks) + " ranks; expected a positive time, >= 2 ranks");
    }
    rows.push_back(design_row(m, slot_bytes));
    measured.push_back(m.measured_us);
  }
  RelativeFitProblem problem;
  for (const Row& row : rows) problem.rows.emplace_back(row.begin(), row.end());
  problem.measured = measured;
  for (ShmParameter parameter : kParameters) problem.names.push_back(to_string(parameter));
  problem.separate_hint =
      "train on both one_shot and two_shot runs and on more than one message size";
  const RelativeFit solved = fit_relative_nonnegative(problem);

  ShmFit fit;
  fit.points = training.size();
  // Parameters with no term in any training row (the step per excess rank when every rank had a
  // core) keep the prior's values.
  const double prior_values[kParams] = {prior.step_us, prior.step_us_per_excess_rank,
                                        prior.copy_gbps, prior.reduce_gbps};
  auto has = [](const std::vector<int>& list, int p) {
    return std::find(list.begin(), list.end(), p) != list.end();
  };
  for (int p = 0; p < kParams; ++p) {
    if (!has(solved.active, p)) {
      std::ostringstream note;
      note << to_string(kParameters[p]) << " not fitted (no training point has its term); kept "
           << prior_values[p];
      fit.notes.push_back(note.str());
    }
  }
  if (solved.constrained) {
    fit.constrained = true;
    std::ostringstream unconstrained;
    unconstrained << "unconstrained fit has a coefficient <= 0:";
    for (int p : solved.active) unconstrained << " " << describe(p, solved.unconstrained[p]) << ";";
    fit.notes.push_back(unconstrained.str());
    for (int p : solved.pinned) {
      fit.notes.push_back(std::string(to_string(kParameters[p])) + " pinned at 0 (" +
                          (p >= 2 ? "rate: not a bottleneck" : "no step cost") + ")");
    }
  }
  fit.cost = prior;
  for (int p : solved.active) {
    fit.fitted.push_back(kParameters[p]);
    const double x = solved.x[p];
    switch (kParameters[p]) {
      case ShmParameter::step_us: fit.cost.step_us = x; break;
      case ShmParameter::step_us_per_excess_rank: fit.cost.step_us_per_excess_rank = x; break;
      case ShmParameter::copy_gbps: fit.cost.copy_gbps = x > 0 ? 1 / x : 0; break;
      case ShmParameter::reduce_gbps: fit.cost.reduce_gbps = x > 0 ? 1 / x : 0; break;
    }
  }
  const Evaluation train = evaluate(fit.cost, training, slot_bytes);
  fit.train_median_rel_error = train.median_abs_rel_error;
  fit.train_max_rel_error = train.max_abs_rel_error;
  return fit;
}

Evaluation evaluate(const coll::ShmLinkCost& cost, const std::vector<ShmMeasurement>& measurements,
                    size_t slot_bytes) {
  return evaluate_with(measurements, [&](const ShmMeasurement& m) {
    return coll::predict_all_reduce_us(m.algorithm, m.bytes, m.nranks, m.excess_ranks, slot_bytes,
                                       cost);
  });
}

}  // namespace tpf::plan
