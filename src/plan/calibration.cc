#include "plan/calibration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "coll/alpha_beta.h"
#include "formats/json.h"
#include "formats/text_files.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

constexpr int kParams = 4;
using Row = std::array<double, kParams>;
using Coefficients = std::array<double, kParams>;

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

// ---- Reading bench JSON -------------------------------------------------------------------------

// `where` is the JSON path of an object ("rows[3]", "rows[3].oop"), empty for the top level.
std::string qualified(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

// `key` of `object`, or an error naming the file, where the key was looked for and `hint`.
const json::Value& member(const json::Value& object, const std::string& key,
                          const std::string& where, const std::string& path,
                          const std::string& hint = "") {
  const json::Value* v = object.find(key);
  if (v == nullptr) {
    fail(path + ": " + (where.empty() ? std::string("the top-level object") : where) +
         " has no key '" + key + "'" + (hint.empty() ? "" : "; " + hint));
  }
  return *v;
}

// Runs `read` (a json accessor) and turns its type error into one naming the file and the key.
template <class Read>
auto typed(const std::string& path, const std::string& key, Read&& read) {
  try {
    return read();
  } catch (const Error& e) {
    fail(path + ": '" + key + "': " + e.what());
  }
}

std::string get_string(const json::Value& object, const std::string& key, const std::string& where,
                       const std::string& path, const std::string& hint = "") {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_string(); });
}

int64_t get_int(const json::Value& object, const std::string& key, const std::string& where,
                const std::string& path, const std::string& hint = "") {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_int(); });
}

bool get_bool(const json::Value& object, const std::string& key, const std::string& where,
              const std::string& path, const std::string& hint = "") {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_bool(); });
}

coll::AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name,
                                                    const std::string& path) {
  if (auto algorithm = coll::parse_all_reduce_algorithm(name)) return *algorithm;
  fail(path + ": 'algorithm' is '" + name + "': expected one_shot or two_shot");
}

// One placement (out-of-place or in-place) of a row: its time, checked for sense.
double row_time_us(const json::Value& measurement, const std::string& where,
                   const std::string& path) {
  if (!measurement.is_object()) {
    fail(path + ": " + where + " is " + json::type_name(measurement.type()) +
         ", expected an object with time_us");
  }
  const json::Value& wrong = member(measurement, "wrong", where, path);
  if (!wrong.is_null()) {
    const int64_t w = typed(path, qualified(where, "wrong"), [&] { return wrong.as_int(); });
    if (w != 0) {
      fail(path + ": " + where + " has " + std::to_string(w) +
           " wrong elements; a run with wrong results is no measurement of the algorithm");
    }
  }
  const json::Value& time = member(measurement, "time_us", where, path);
  const double us = typed(path, qualified(where, "time_us"), [&] { return time.as_double(); });
  if (!(us > 0) || !std::isfinite(us)) {
    fail(path + ": " + where + ".time_us is " + std::to_string(us) + ", expected a positive time");
  }
  return us;
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

struct Solve {
  bool full_rank = false;
  int dependent = -1;  // when not full rank: a parameter the earlier ones already explain
  Coefficients x{};
  double residual = 0;  // sum of squared relative errors
};

// Least squares of sum_i (rows[i] . x / measured[i] - 1)^2 over the parameters in `use`, the
// others held at 0. Householder QR on column-normalized rows: the columns differ by orders of
// magnitude (steps against kilobytes), and QR avoids squaring the condition number.
Solve solve_relative(const std::vector<Row>& rows, const std::vector<double>& measured,
                     const std::vector<int>& use) {
  const size_t m = rows.size();
  const size_t k = use.size();
  std::vector<std::vector<double>> a(k, std::vector<double>(m));  // column-major
  std::vector<double> y(m, 1.0);
  std::vector<double> scale(k, 0.0);
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < m; ++i) {
      a[j][i] = rows[i][use[j]] / measured[i];
      scale[j] += a[j][i] * a[j][i];
    }
    scale[j] = std::sqrt(scale[j]);
    if (scale[j] > 0) {
      for (double& v : a[j]) v /= scale[j];
    }
  }
  Solve out;
  constexpr double kRankTolerance = 1e-9;  // columns have unit norm: |R_jj| below this is 0
  for (size_t j = 0; j < k; ++j) {
    double norm = 0;
    for (size_t i = j; i < m; ++i) norm += a[j][i] * a[j][i];
    norm = std::sqrt(norm);
    if (j >= m || norm < kRankTolerance) {
      out.dependent = use[j];
      return out;
    }
    // Householder reflection taking a[j][j..] to (alpha, 0, ...).
    const double alpha = a[j][j] > 0 ? -norm : norm;
    std::vector<double> v(a[j].begin() + static_cast<std::ptrdiff_t>(j), a[j].end());
    v[0] -= alpha;
    double vv = 0;
    for (double e : v) vv += e * e;
    auto reflect = [&](std::vector<double>& col) {
      double dot = 0;
      for (size_t i = j; i < m; ++i) dot += v[i - j] * col[i];
      const double f = 2 * dot / vv;
      for (size_t i = j; i < m; ++i) col[i] -= f * v[i - j];
    };
    if (vv > 0) {
      for (size_t c = j; c < k; ++c) reflect(a[c]);
      reflect(y);
    }
  }
  std::vector<double> z(k, 0.0);
  for (size_t jj = k; jj-- > 0;) {
    double s = y[jj];
    for (size_t c = jj + 1; c < k; ++c) s -= a[c][jj] * z[c];
    z[jj] = s / a[jj][jj];
  }
  out.full_rank = true;
  for (size_t j = 0; j < k; ++j) out.x[use[j]] = z[j] / scale[j];
  for (size_t i = 0; i < m; ++i) {
    double p = 0;
    for (int c = 0; c < kParams; ++c) p += rows[i][c] * out.x[c];
    const double r = p / measured[i] - 1;
    out.residual += r * r;
  }
  return out;
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
  auto same_point = [](const ShmMeasurement& a, const ShmMeasurement& b) {
    return a.nranks == b.nranks && a.algorithm == b.algorithm && a.excess_ranks == b.excess_ranks &&
           a.bytes == b.bytes && a.in_place == b.in_place;
  };
  std::vector<ShmMeasurement> out;
  std::vector<std::vector<double>> times;
  for (const ShmMeasurement& m : runs) {
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
  const json::Value root = json::parse(text, path);
  if (!root.is_object()) {
    fail(path + ": the top level is " + std::string(json::type_name(root.type())) +
         ", expected the object `tpf bench --json` writes");
  }
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

  const json::Value& rows = member(root, "rows", top, path);
  if (!rows.is_array()) {
    fail(path + ": 'rows' is " + json::type_name(rows.type()) + ", expected an array of sizes");
  }
  const json::Array& array = rows.as_array();
  if (array.empty()) fail(path + ": 'rows' is empty: the benchmark measured nothing");
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
    m.in_place = false;
    m.measured_us = row_time_us(member(row, "oop", where, path), where + ".oop", path);
    m.source = path + " " + where + " oop";
    file.measurements.push_back(m);
    const json::Value* ip = row.find("ip");
    if (ip != nullptr && !ip->is_null()) {
      m.in_place = true;
      m.measured_us = row_time_us(*ip, where + ".ip", path);
      m.source = path + " " + where + " ip";
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
  // Parameters with no term in any training row (the step per excess rank when every rank had a
  // core) keep the prior's values.
  std::vector<int> active;
  for (int p = 0; p < kParams; ++p) {
    bool used = false;
    for (const Row& row : rows) used = used || row[p] != 0;
    if (used) active.push_back(p);
  }
  ShmFit fit;
  fit.points = training.size();
  const double prior_values[kParams] = {prior.step_us, prior.step_us_per_excess_rank,
                                        prior.copy_gbps, prior.reduce_gbps};
  for (int p = 0; p < kParams; ++p) {
    if (std::find(active.begin(), active.end(), p) == active.end()) {
      std::ostringstream note;
      note << to_string(kParameters[p]) << " not fitted (no training point has its term); kept "
           << prior_values[p];
      fit.notes.push_back(note.str());
    }
  }

  Solve best = solve_relative(rows, measured, active);
  if (!best.full_rank) {
    std::string names;
    for (int p : active)
      names += (names.empty() ? "" : ", ") + std::string(to_string(kParameters[p]));
    fail("calibration: the " + std::to_string(training.size()) +
         " training points cannot separate " + names + " (" +
         to_string(kParameters[best.dependent]) +
         " is explained by the others); train on both one_shot and two_shot runs and on more "
         "than one message size");
  }
  bool positive = true;
  for (int p : active) positive = positive && best.x[p] > 0;
  if (!positive) {
    // Non-negative least squares by enumeration: with at most four parameters, the best fit among
    // the subsets whose own least-squares solution is positive is the constrained optimum.
    fit.constrained = true;
    std::ostringstream unconstrained;
    unconstrained << "unconstrained fit has a coefficient <= 0:";
    for (int p : active) unconstrained << " " << describe(p, best.x[p]) << ";";
    fit.notes.push_back(unconstrained.str());
    Solve constrained;
    bool found = false;
    for (unsigned mask = 1; mask < (1u << active.size()); ++mask) {
      std::vector<int> subset;
      for (size_t j = 0; j < active.size(); ++j) {
        if (mask & (1u << j)) subset.push_back(active[j]);
      }
      Solve s = solve_relative(rows, measured, subset);
      if (!s.full_rank) continue;
      bool ok = true;
      for (int p : subset) ok = ok && s.x[p] > 0;
      if (ok && (!found || s.residual < constrained.residual)) {
        constrained = s;
        found = true;
      }
    }
    if (!found) fail("calibration: no fit with non-negative coefficients exists");
    best = constrained;
    for (int p : active) {
      if (best.x[p] == 0) {
        fit.notes.push_back(std::string(to_string(kParameters[p])) + " pinned at 0 (" +
                            (p >= 2 ? "rate: not a bottleneck" : "no step cost") + ")");
      }
    }
  }
  fit.cost = prior;
  for (int p : active) {
    fit.fitted.push_back(kParameters[p]);
    const double x = best.x[p];
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
  Evaluation e;
  std::vector<double> abs_errors;
  for (const ShmMeasurement& m : measurements) {
    PointError p;
    p.measurement = m;
    p.predicted_us = coll::predict_all_reduce_us(m.algorithm, m.bytes, m.nranks, m.excess_ranks,
                                                 slot_bytes, cost);
    p.rel_error = (p.predicted_us - m.measured_us) / m.measured_us;
    const double a = std::abs(p.rel_error);
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

}  // namespace tpf::plan
