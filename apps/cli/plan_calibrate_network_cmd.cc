#include "cli/plan_calibrate_network_cmd.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cli/bench_spec.h"  // parse_byte_size
#include "cli/command_line.h"
#include "cli/option_values.h"
#include "comm/settings.h"
#include "plan/calibration.h"  // median
#include "plan/network_calibration.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

constexpr const char* kDescription =
    "Fits the network link class (call_us, step_us, link_gbps, reduce_gbps of\n"
    "coll::NetworkLinkCost)\n"
    "by least squares on relative error to the training runs (one host count, sizes up to a\n"
    "bound), then predicts the held-out runs and states the error, and checks the algorithm\n"
    "choice: for every size measured with both network algorithms, whether the one the fitted\n"
    "model picks was the faster, and by how much it lost where not.\n"
    "Runs: bench/net/network_calibration.sh OUT (root; emulated hosts, TPF_NET_ALGO forced).\n"
    "Example: tpf plan calibrate-network --bench docs/results/calibration-network/*.json";

struct Flags {
  std::vector<std::string> bench_files;
  std::optional<std::string> train_hosts;
  std::optional<std::string> train_max_bytes;
};

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100 * fraction);
  return buf;
}

void print_points(const char* title, const plan::NetworkEvaluation& e) {
  std::printf("\n%s:\n", title);
  std::printf("  %5s  %-10s  %-9s  %-3s  %10s  %12s  %12s  %9s\n", "hosts", "collective", "algo",
              "pl", "bytes", "predicted_us", "measured_us", "rel_error");
  for (const plan::NetworkPointError& p : e.points) {
    const plan::NetworkMeasurement& m = p.measurement;
    std::printf("  %5d  %-10s  %-9s  %-3s  %10zu  %12.1f  %12.1f  %+8.1f%%\n", m.hosts,
                coll::collective_name(m.collective), coll::network_algorithm_name(m.algorithm),
                m.in_place ? "ip" : "oop", m.bytes, p.predicted_us, m.measured_us,
                100 * p.rel_error);
  }
}

// Whether the fitted model spends at least half of a point's time on the link.
const char* bound_of(const plan::NetworkPointError& p, const coll::NetworkLinkCost& cost) {
  const plan::NetworkMeasurement& m = p.measurement;
  const double link_us =
      coll::network_traffic(m.collective, m.algorithm, m.bytes, m.hosts, m.min_slice_bytes)
          .wire_bytes /
      (cost.link_gbps * 1e3);
  return link_us >= 0.5 * p.predicted_us ? "link" : "latency";
}

// Median and max |error| of each (hosts, collective, algorithm, what bounds it) group.
void print_groups(const plan::NetworkEvaluation& e, const coll::NetworkLinkCost& cost) {
  using Key = std::tuple<int, std::string, std::string, std::string>;
  std::map<Key, std::vector<double>> groups;
  for (const plan::NetworkPointError& p : e.points) {
    const plan::NetworkMeasurement& m = p.measurement;
    groups[{m.hosts, coll::collective_name(m.collective), coll::network_algorithm_name(m.algorithm),
            bound_of(p, cost)}]
        .push_back(std::abs(p.rel_error));
  }
  std::printf("\nheld-out |error| by group (link-bound: the model spends >= half on the link):\n");
  for (const auto& [key, errors] : groups) {
    double max = 0;
    for (double x : errors) max = std::max(max, x);
    std::printf("  hosts=%d %-10s %-9s %-13s  %3zu points  median %8s  max %8s\n", std::get<0>(key),
                std::get<1>(key).c_str(), std::get<2>(key).c_str(),
                (std::get<3>(key) + "-bound").c_str(), errors.size(),
                percent(plan::median(errors)).c_str(), percent(max).c_str());
  }
}

// The model's pick among the measured algorithms: its choice where that was measured, else the
// measured one it prices lowest.
coll::NetworkAlgorithm pick_among(coll::Collective op, size_t bytes, int hosts,
                                  const coll::NetworkLinkCost& cost,
                                  const std::map<coll::NetworkAlgorithm, double>& measured) {
  const coll::NetworkAlgorithm choice =
      coll::choose_network_algorithm(op, bytes, hosts, std::nullopt, cost);
  if (measured.count(choice) != 0) return choice;
  coll::NetworkAlgorithm pick = measured.begin()->first;
  for (const auto& [algorithm, us] : measured) {
    if (coll::network_choice_us(op, algorithm, bytes, hosts, cost) <
        coll::network_choice_us(op, pick, bytes, hosts, cost)) {
      pick = algorithm;
    }
  }
  return pick;
}

// For each (collective, hosts, size, placement) measured with two or more algorithms, the model's
// pick among them against the fastest measurement.
void print_choices(const coll::NetworkLinkCost& cost,
                   const std::vector<plan::NetworkMeasurement>& points) {
  using Key = std::tuple<std::string, int, size_t, bool>;
  std::map<Key, std::map<coll::NetworkAlgorithm, double>> measured;
  for (const plan::NetworkMeasurement& m : points) {
    measured[{coll::collective_name(m.collective), m.hosts, m.bytes, m.in_place}][m.algorithm] =
        m.measured_us;
  }
  size_t compared = 0;
  size_t agreed = 0;
  std::printf("\nalgorithm choice of the fitted model (measured us of each algorithm):\n");
  for (const auto& [key, times] : measured) {
    if (times.size() < 2) continue;
    const auto& [name, hosts, bytes, in_place] = key;
    const coll::Collective op = *coll::parse_collective(name);
    const coll::NetworkAlgorithm pick = pick_among(op, bytes, hosts, cost, times);
    double best = times.begin()->second;
    std::string columns;
    for (const auto& [algorithm, us] : times) {
      best = std::min(best, us);
      char column[48];
      std::snprintf(column, sizeof column, "  %s %10.1f", coll::network_algorithm_name(algorithm),
                    us);
      columns += column;
    }
    const double lost = times.at(pick) / best - 1;
    ++compared;
    if (lost == 0) ++agreed;
    std::printf("  hosts=%d %-10s %-3s %10zu%s  picks %-9s%s\n", hosts, name.c_str(),
                in_place ? "ip" : "oop", bytes, columns.c_str(), coll::network_algorithm_name(pick),
                lost == 0 ? "" : ("  (" + percent(lost) + " slower than the fastest)").c_str());
  }
  std::printf("picks the faster algorithm at %zu of %zu points\n", agreed, compared);
}

// The TPF_NET_* settings that make the runtime use the fitted constants; one the fit pinned at 0
// is left out (the runtime takes positive values only and keeps its default).
std::string env_overrides(const coll::NetworkLinkCost& c) {
  std::string out;
  for (const auto& [name, value] : {std::pair{"TPF_NET_CALL_US", c.call_us},
                                    {"TPF_NET_STEP_US", c.step_us},
                                    {"TPF_NET_GBPS", c.link_gbps},
                                    {"TPF_NET_REDUCE_GBPS", c.reduce_gbps}}) {
    if (!(value > 0)) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s=%.4g", out.empty() ? "" : " ", name, value);
    out += buf;
  }
  return out;
}

int calibrate(const Flags& flags) {
  if (flags.bench_files.empty()) {
    throw UsageError("--bench FILE.json is required (tpf bench --json across hosts)");
  }
  const int train_hosts =
      static_cast<int>(integer_option(flags.train_hosts, "--train-hosts", 2, 2, 1 << 20));
  size_t max_bytes = SIZE_MAX;
  if (flags.train_max_bytes) {
    const auto bytes = parse_byte_size(*flags.train_max_bytes);
    if (!bytes || *bytes == 0) {
      throw UsageError("--train-max-bytes expects a byte count such as 65536 or 64K, got '" +
                       *flags.train_max_bytes + "'");
    }
    max_bytes = *bytes;
  }
  std::vector<plan::NetworkMeasurement> runs;
  for (const std::string& path : flags.bench_files) {
    for (plan::NetworkMeasurement& m : plan::read_network_bench_file(path)) runs.push_back(m);
  }
  const std::vector<plan::NetworkMeasurement> points = plan::median_of_repeats(runs);
  std::vector<plan::NetworkMeasurement> training;
  std::vector<plan::NetworkMeasurement> held_out;
  for (const plan::NetworkMeasurement& m : points) {
    (m.hosts == train_hosts && m.bytes <= max_bytes ? training : held_out).push_back(m);
  }
  if (training.empty()) {
    throw Error(ErrorCode::invalid_argument,
                "no run on " + std::to_string(train_hosts) + " hosts of at most " +
                    std::to_string(max_bytes) +
                    " bytes in the bench files; change --train-hosts or --train-max-bytes");
  }
  const plan::NetworkFit fit =
      plan::fit_network_link_cost(training, detail::resolve_comm_settings().tuning.network_cost);
  std::printf("# tpf plan calibrate-network: %zu bench files, %zu points (%zu runs)\n",
              flags.bench_files.size(), points.size(), runs.size());
  std::printf("# training set: %d hosts%s: %zu points; held out: %zu points\n", train_hosts,
              max_bytes == SIZE_MAX ? "" : (", bytes <= " + std::to_string(max_bytes)).c_str(),
              training.size(), held_out.size());
  std::printf("\nfitted constants (training median |error| %s, max %s):\n",
              percent(fit.train_median_rel_error).c_str(),
              percent(fit.train_max_rel_error).c_str());
  std::printf("  %s\n", env_overrides(fit.cost).c_str());
  std::string fitted;
  for (const std::string& name : fit.fitted) fitted += " " + name;
  std::printf("  fitted:%s\n", fitted.c_str());
  for (const std::string& note : fit.notes) std::printf("  note: %s\n", note.c_str());
  print_points("training points", plan::evaluate(fit.cost, training));
  if (!held_out.empty()) {
    const plan::NetworkEvaluation held = plan::evaluate(fit.cost, held_out);
    print_points("held-out points", held);
    print_groups(held, fit.cost);
    std::printf("\nheld-out: %zu points, median |error| %s, max %s\n", held.points.size(),
                percent(held.median_abs_rel_error).c_str(),
                percent(held.max_abs_rel_error).c_str());
  }
  print_choices(fit.cost, points);
  return kExitOk;
}

}  // namespace

void add_plan_calibrate_network_command(Command& plan) {
  Command command = plan.add_subcommand(
      "calibrate-network", "fit the network link class to tpf bench results across hosts");
  command.footer(kDescription);
  auto flags = std::make_shared<Flags>();
  command
      .add_option("--bench", flags->bench_files,
                  "`tpf bench all_reduce|broadcast --json` across hosts, one rank per host, with\n"
                  "TPF_NET_ALGO set (repeat for several files)")
      .type_name("FILE.json");
  command
      .add_option("--train-hosts", flags->train_hosts, "host count of the training set (default 2)")
      .type_name("H");
  command
      .add_option("--train-max-bytes", flags->train_max_bytes,
                  "largest message size of the training set (default: all)")
      .type_name("N");
  set_action(command, [flags] { return calibrate(*flags); });
}

}  // namespace tpf::cli
