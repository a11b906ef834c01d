#include "plan/least_squares.h"

#include <cmath>
#include <cstddef>

#include "tpf/error.h"

namespace tpf::plan {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

struct Solve {
  bool full_rank = false;
  int dependent = -1;  // when not full rank: a column the earlier ones already explain
  std::vector<double> x;
  double residual = 0;  // sum of squared relative errors
};

// Least squares over the columns in `use`, the others held at 0.
Solve solve_relative(const RelativeFitProblem& p, const std::vector<int>& use) {
  const size_t m = p.rows.size();
  const size_t k = use.size();
  const size_t columns = p.names.size();
  std::vector<std::vector<double>> a(k, std::vector<double>(m));  // column-major
  std::vector<double> y(m, 1.0);
  std::vector<double> scale(k, 0.0);
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < m; ++i) {
      a[j][i] = p.rows[i][use[j]] / p.measured[i];
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
  out.x.assign(columns, 0.0);
  for (size_t j = 0; j < k; ++j) out.x[use[j]] = z[j] / scale[j];
  for (size_t i = 0; i < m; ++i) {
    double predicted = 0;
    for (size_t c = 0; c < columns; ++c) predicted += p.rows[i][c] * out.x[c];
    const double r = predicted / p.measured[i] - 1;
    out.residual += r * r;
  }
  return out;
}

}  // namespace

RelativeFit fit_relative_nonnegative(const RelativeFitProblem& p) {
  if (p.rows.empty()) fail("calibration: no training measurements");
  const size_t columns = p.names.size();
  for (size_t i = 0; i < p.rows.size(); ++i) {
    if (p.rows[i].size() != columns || !(p.measured.at(i) > 0)) {
      fail("calibration: measurement " + std::to_string(i) + " has " +
           std::to_string(p.rows[i].size()) + " terms and time " +
           std::to_string(p.measured.at(i)) + " us; expected " + std::to_string(columns) +
           " terms and a positive time");
    }
  }
  RelativeFit fit;
  for (size_t c = 0; c < columns; ++c) {
    bool used = false;
    for (const std::vector<double>& row : p.rows) used = used || row[c] != 0;
    if (used) fit.active.push_back(static_cast<int>(c));
  }
  Solve best = solve_relative(p, fit.active);
  if (!best.full_rank) {
    std::string names;
    for (int c : fit.active) names += (names.empty() ? "" : ", ") + p.names[c];
    fail("calibration: the " + std::to_string(p.rows.size()) + " training points cannot separate " +
         names + " (" + p.names[best.dependent] + " is explained by the others); " +
         p.separate_hint);
  }
  bool positive = true;
  for (int c : fit.active) positive = positive && best.x[c] > 0;
  if (!positive) {
    // The best fit among the subsets whose own least-squares solution is positive is the
    // constrained optimum.
    fit.constrained = true;
    fit.unconstrained = best.x;
    Solve constrained;
    bool found = false;
    for (unsigned mask = 1; mask < (1u << fit.active.size()); ++mask) {
      std::vector<int> subset;
      for (size_t j = 0; j < fit.active.size(); ++j) {
        if (mask & (1u << j)) subset.push_back(fit.active[j]);
      }
      Solve s = solve_relative(p, subset);
      if (!s.full_rank) continue;
      bool ok = true;
      for (int c : subset) ok = ok && s.x[c] > 0;
      if (ok && (!found || s.residual < constrained.residual)) {
        constrained = s;
        found = true;
      }
    }
    if (!found) fail("calibration: no fit with non-negative coefficients exists");
    best = constrained;
    for (int c : fit.active) {
      if (best.x[c] == 0) fit.pinned.push_back(c);
    }
  }
  fit.x = best.x;
  return fit;
}

}  // namespace tpf::plan
