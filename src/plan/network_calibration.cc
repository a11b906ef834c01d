#include "plan/network_calibration.h"

#include <cmath>
#include <sstream>

#include "formats/text_files.h"
#include "plan/bench_json.h"
#include "plan/calibration.h"
#include "plan/least_squares.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

// The columns of the fit: predicted us = call_us + steps * step_us + link bytes / link rate +
// combined bytes / reduce rate (rates fitted as their inverse, in us per kB).
enum Column { kCall = 0, kStep = 1, kLink = 2, kReduce = 3, kColumns = 4 };
const char* const kColumnNames[kColumns] = {"call_us", "step_us", "link_gbps", "reduce_gbps"};

std::vector<double> design_row(const NetworkMeasurement& m) {
  const coll::StepTraffic t = coll::network_traffic(m.collective, m.algorithm, m.bytes, m.hosts,
                                                    m.min_slice_bytes, m.chain);
  return {1.0, t.steps, t.wire_bytes * 1e-3, t.reduced_bytes * 1e-3};
}

std::string describe(int column, double x) {
  std::ostringstream os;
  if (column == kCall || column == kStep) {
    os << kColumnNames[column] << " = " << x << " us";
  } else {
    os << "1/" << kColumnNames[column] << " = " << x << " ns/B";
  }
  return os.str();
}

}  // namespace

std::vector<NetworkMeasurement> parse_network_bench_json(const std::string& text,
                                                         const std::string& path) {
  const json::Value root = parse_bench_object(text, path);
  const std::string top;
  const std::string collective = get_string(root, "collective", top, path);
  const std::optional<coll::Collective> op = coll::parse_collective(collective);
  if (!op || !coll::has_network_choice(*op)) {
    fail(path + ": 'collective' is '" + collective +
         "': the network link class is fitted from all_reduce and broadcast runs");
  }
  const std::string why =
      "tpf bench --json records it for runs across hosts; measure with "
      "bench/net/network_calibration.sh (one rank per host, TPF_NET_ALGO set)";
  const int64_t hosts = get_int(root, "hosts", top, path, why);
  const int64_t nranks = get_int(root, "nranks", top, path);
  if (hosts < 2 || nranks != hosts) {
    fail(path + ": " + std::to_string(nranks) + " ranks on " + std::to_string(hosts) +
         " hosts: the network link class is fitted from runs with one rank on each of >= 2 "
         "hosts (the shared-memory steps inside a host are not part of it)");
  }
  const std::string name = get_string(root, "network_algorithm", top, path, why);
  const std::optional<coll::NetworkAlgorithm> algorithm = coll::parse_network_algorithm(name);
  const bool priced =
      algorithm && *algorithm != coll::NetworkAlgorithm::per_rail &&
      (*algorithm != coll::NetworkAlgorithm::tree || *op == coll::Collective::broadcast) &&
      (*algorithm != coll::NetworkAlgorithm::halving_doubling ||
       *op == coll::Collective::all_reduce);
  if (!priced) {
    fail(path + ": 'network_algorithm' is '" + name + "' for " + collective +
         ": expected one_shot or pipelined, tree for broadcast or halving_doubling for all_reduce "
         "(forced with TPF_NET_ALGO; the "
         "fit must know which algorithm ran)");
  }
  size_t min_slice_bytes = NetworkMeasurement{}.min_slice_bytes;  // runs that predate the key
  if (root.find("network_min_slice_bytes") != nullptr) {
    const int64_t value = get_int(root, "network_min_slice_bytes", top, path);
    if (value <= 0) {
      fail(path + ": 'network_min_slice_bytes' is " + std::to_string(value) +
           ", expected a positive byte count");
    }
    min_slice_bytes = static_cast<size_t>(value);
  }
  coll::ChainCut chain;  // runs that predate the keys: the fixed cut
  if (root.find("network_chain_round_us") != nullptr) {
    chain.round_us = get_double(root, "network_chain_round_us", top, path);
    chain.link_gbps = get_double(root, "network_chain_gbps", top, path);
    if (!(chain.round_us > 0) || !(chain.link_gbps > 0)) {
      fail(path + ": 'network_chain_round_us' and 'network_chain_gbps' are " +
           std::to_string(chain.round_us) + " and " + std::to_string(chain.link_gbps) +
           ", expected positive numbers");
    }
  }
  std::vector<NetworkMeasurement> out;
  const json::Array& rows = rows_of(root, path);
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string where = "rows[" + std::to_string(r) + "]";
    if (!rows[r].is_object()) {
      fail(path + ": " + where + " is " + json::type_name(rows[r].type()) + ", expected an object");
    }
    const int64_t bytes = get_int(rows[r], "bytes", where, path);
    if (bytes < 0) fail(path + ": " + where + ".bytes is " + std::to_string(bytes));
    if (bytes == 0) continue;
    NetworkMeasurement m;
    m.collective = *op;
    m.algorithm = *algorithm;
    m.hosts = static_cast<int>(hosts);
    m.bytes = static_cast<size_t>(bytes);
    m.min_slice_bytes = min_slice_bytes;
    m.chain = chain;
    for (const PlacementTime& t : row_times_us(rows[r], where, path)) {
      m.in_place = t.in_place;
      m.measured_us = t.us;
      m.source = path + " " + t.where;
      out.push_back(m);
    }
  }
  return out;
}

std::vector<NetworkMeasurement> read_network_bench_file(const std::string& path) {
  return parse_network_bench_json(read_text_file(path, "bench results"), path);
}

std::vector<NetworkMeasurement> median_of_repeats(const std::vector<NetworkMeasurement>& runs) {
  return median_of_repeats_by(runs, [](const NetworkMeasurement& a, const NetworkMeasurement& b) {
    return a.collective == b.collective && a.algorithm == b.algorithm && a.hosts == b.hosts &&
           a.bytes == b.bytes && a.in_place == b.in_place;
  });
}

NetworkFit fit_network_link_cost(const std::vector<NetworkMeasurement>& training,
                                 const coll::NetworkLinkCost& prior) {
  RelativeFitProblem problem;
  for (const NetworkMeasurement& m : training) {
    problem.rows.push_back(design_row(m));
    problem.measured.push_back(m.measured_us);
  }
  problem.names.assign(kColumnNames, kColumnNames + kColumns);
  problem.separate_hint =
      "train on both one_shot and pipelined runs of all_reduce, small and large sizes";
  const RelativeFit solved = fit_relative_nonnegative(problem);

  NetworkFit fit;
  fit.points = training.size();
  fit.cost = prior;
  for (int c : solved.active) {
    const double x = solved.x[c];
    fit.fitted.push_back(kColumnNames[c]);
    if (c == kCall) fit.cost.call_us = x;
    if (c == kStep) fit.cost.step_us = x;
    if (c == kLink) fit.cost.link_gbps = x > 0 ? 1 / x : 0;
    if (c == kReduce) fit.cost.reduce_gbps = x > 0 ? 1 / x : 0;
  }
  if (solved.active.size() < kColumns) {
    fit.notes.push_back("parameters without a term in any training point keep their defaults");
  }
  if (solved.constrained) {
    std::ostringstream note;
    note << "unconstrained fit has a coefficient <= 0:";
    for (int c : solved.active) note << " " << describe(c, solved.unconstrained[c]) << ";";
    fit.notes.push_back(note.str());
    for (int c : solved.pinned) {
      fit.notes.push_back(std::string(kColumnNames[c]) + " pinned at 0 (" +
                          (c <= kStep ? "no fixed cost" : "rate: not a bottleneck") + ")");
    }
  }
  const NetworkEvaluation train = evaluate(fit.cost, training);
  fit.train_median_rel_error = train.median_abs_rel_error;
  fit.train_max_rel_error = train.max_abs_rel_error;
  return fit;
}

NetworkEvaluation evaluate(const coll::NetworkLinkCost& cost,
                           const std::vector<NetworkMeasurement>& measurements) {
  return evaluate_with(measurements, [&](const NetworkMeasurement& m) {
    return coll::predict_network_us(m.collective, m.algorithm, m.bytes, m.hosts, cost,
                                    m.min_slice_bytes, m.chain);
  });
}

}  // namespace tpf::plan
