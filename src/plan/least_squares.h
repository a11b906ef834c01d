// Linear least squares on relative error, with non-negative coefficients: the fit behind the
// calibration of link classes (plan/calibration.h, plan/network_calibration.h). A model predicts
// time = row . x, where each row holds a measurement's terms (steps, bytes) and x the costs (us
// per step, us per byte); the fit minimizes sum_i (row_i . x / measured_i - 1)^2, so small and
// large messages weigh alike.
#pragma once

#include <string>
#include <vector>

namespace tpf::plan {

struct RelativeFitProblem {
  std::vector<std::vector<double>> rows;  // one per measurement, one term per column
  std::vector<double> measured;           // positive times, one per row
  std::vector<std::string> names;         // one per column, for messages
  std::string separate_hint;              // what to train on when columns cannot be separated
};

struct RelativeFit {
  std::vector<double> x;              // one per column; 0 for columns that are not active or pinned
  std::vector<int> active;            // columns some row has a term in (the others are not fitted)
  std::vector<int> pinned;            // active columns the non-negative constraint put at 0
  bool constrained = false;           // the unconstrained solution had a coefficient <= 0
  std::vector<double> unconstrained;  // that solution, where constrained
};

// Throws tpf::Error(invalid_argument) when there are no rows, a time is not positive, the rows
// cannot separate the active columns (naming one the others explain, then the hint), or no
// non-negative fit exists. Householder QR on column-normalized rows (the columns differ by
// orders of magnitude: steps against kilobytes; QR avoids squaring the condition number); the
// non-negative optimum by enumerating the subsets of active columns (a handful of parameters).
RelativeFit fit_relative_nonnegative(const RelativeFitProblem& problem);

}  // namespace tpf::plan
