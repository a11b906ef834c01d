// `tpf plan calibrate --bench FILE.json ...`: fits the shared-memory link class on a training
// subset of `tpf bench all_reduce` measurements (by default sizes up to 64 KiB at N = 2) and
// states its error on the rest (larger sizes, other rank counts).
#include "cli/plan_calibrate_cmd.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/bench_spec.h"  // parse_byte_size
#include "cli/command_line.h"
#include "cli/commands.h"
#include "comm/settings.h"
#include "formats/json.h"
#include "plan/calibration.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

constexpr const char* kDescription =
    "Fits the shared-memory link class (step_us, step_us_per_excess_rank, copy_gbps,\n"
    "reduce_gbps of coll::ShmLinkCost) by least squares on relative error to the training\n"
    "points, then predicts the held-out points and states the error.\n"
    "Where several files measured the same point (N, algorithm, size, placement), the median\n"
    "of the runs counts (robust to runs slowed or sped up by the rest of a shared machine).\n"
    "Parameters without a training point keep their defaults (TPF_SHM_* overrides apply).\n"
    "Example: bench/plan/calibrate.sh build/calibration";

// The command line as given; options() converts it.
struct CalibrateFlags {
  std::vector<std::string> bench_files;
  std::optional<std::string> train_max_bytes;
  std::optional<std::string> train_ranks;
  std::string placement = "oop";
  bool json = false;
};

struct Options {
  std::vector<std::string> bench_files;
  size_t train_max_bytes = size_t{64} << 10;
  std::set<int> train_ranks{2};
  bool use_oop = true;
  bool use_ip = false;
  bool json = false;
};

size_t parse_train_max_bytes(const std::string& text) {
  const auto bytes = parse_byte_size(text);
  if (!bytes || *bytes == 0) {
    throw UsageError("--train-max-bytes expects a byte count such as 65536 or 64K, got '" + text +
                     "'");
  }
  return *bytes;
}

std::set<int> parse_train_ranks(const std::string& text) {
  std::set<int> ranks;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    int n = 0;
    const char* end = item.data() + item.size();
    const auto [ptr, ec] = std::from_chars(item.data(), end, n);
    if (ec != std::errc() || ptr != end || n < 2) {
      throw UsageError("--train-ranks expects rank counts >= 2 separated by commas, got '" + text +
                       "'");
    }
    ranks.insert(n);
  }
  if (ranks.empty()) throw UsageError("--train-ranks needs at least one rank count");
  return ranks;
}

Options options(const CalibrateFlags& flags) {
  Options o;
  o.bench_files = flags.bench_files;
  for (const std::string& f : o.bench_files) {
    if (f.empty()) throw UsageError("--bench needs a file name");
  }
  if (o.bench_files.empty()) throw UsageError("--bench FILE.json is required (tpf bench --json)");
  if (flags.train_max_bytes) o.train_max_bytes = parse_train_max_bytes(*flags.train_max_bytes);
  if (flags.train_ranks) o.train_ranks = parse_train_ranks(*flags.train_ranks);
  const std::string& placement = flags.placement;
  if (placement != "oop" && placement != "ip" && placement != "both") {
    throw UsageError("--placement expects oop, ip or both, got '" + placement + "'");
  }
  o.use_oop = placement != "ip";
  o.use_ip = placement != "oop";
  o.json = flags.json;
  return o;
}

std::string ranks_text(const std::set<int>& ranks) {
  std::string out;
  for (int n : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(n);
  }
  return out;
}

std::string number(double v, const char* format = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The TPF_SHM_* overrides that make the runtime use the fitted constants. A constant the fit
// pinned at 0 is left out: the runtime accepts only positive values, and keeps its default.
std::string env_overrides(const coll::ShmLinkCost& c) {
  std::string out;
  auto add = [&](const char* name, double value) {
    if (!(value > 0)) return;
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += number(value);
  };
  add("TPF_SHM_STEP_US", c.step_us);
  add("TPF_SHM_EXCESS_STEP_US", c.step_us_per_excess_rank);
  add("TPF_SHM_COPY_GBPS", c.copy_gbps);
  add("TPF_SHM_REDUCE_GBPS", c.reduce_gbps);
  return out;
}

struct Data {
  size_t slot_bytes = 0;
  std::vector<plan::ShmMeasurement> training;
  std::vector<plan::ShmMeasurement> held_out;
  std::vector<std::string> notes;
};

Data load(const Options& o) {
  Data d;
  std::vector<plan::ShmMeasurement> all;
  for (const std::string& path : o.bench_files) {
    plan::BenchFile file = plan::read_bench_file(path);
    if (d.slot_bytes != 0 && file.slot_bytes != d.slot_bytes) {
      throw Error(ErrorCode::invalid_argument,
                  path + ": slot_bytes " + std::to_string(file.slot_bytes) + " differs from " +
                      std::to_string(d.slot_bytes) + " of " + o.bench_files.front() +
                      "; calibrate runs with one TPF_SHM_BUFFER_BYTES at a time");
    }
    d.slot_bytes = file.slot_bytes;
    d.notes.insert(d.notes.end(), file.notes.begin(), file.notes.end());
    for (plan::ShmMeasurement& m : file.measurements) {
      if (m.in_place ? o.use_ip : o.use_oop) all.push_back(std::move(m));
    }
  }
  const size_t runs = all.size();
  std::vector<plan::ShmMeasurement> points = plan::median_of_repeats(std::move(all));
  const size_t repeated = runs - points.size();
  for (plan::ShmMeasurement& m : points) {
    const bool train = o.train_ranks.count(m.nranks) > 0 && m.bytes <= o.train_max_bytes;
    (train ? d.training : d.held_out).push_back(std::move(m));
  }
  if (repeated > 0) {
    d.notes.push_back(std::to_string(repeated) +
                      " repeated measurements of the same point: the median of each counts");
  }
  if (d.training.empty()) {
    throw Error(ErrorCode::invalid_argument,
                "no measurement at N in {" + ranks_text(o.train_ranks) + "} of at most " +
                    std::to_string(o.train_max_bytes) +
                    " bytes in the bench files; change --train-ranks or --train-max-bytes");
  }
  return d;
}

// Median and max |error| of the held-out points of each (ranks, algorithm) group.
struct Group {
  std::vector<double> errors;
};

std::map<std::pair<int, std::string>, Group> by_group(const plan::Evaluation& e) {
  std::map<std::pair<int, std::string>, Group> groups;
  for (const plan::PointError& p : e.points) {
    groups[{p.measurement.nranks, coll::all_reduce_algorithm_name(p.measurement.algorithm)}]
        .errors.push_back(std::abs(p.rel_error));
  }
  return groups;
}

std::string percent(double fraction) { return number(100 * fraction, "%.1f") + " %"; }

void print_points(const char* title, const plan::Evaluation& e) {
  std::printf("\n%s:\n", title);
  std::printf("  %5s  %-8s  %-6s  %-3s  %10s  %12s  %12s  %9s\n", "N", "algo", "excess", "pl",
              "bytes", "predicted_us", "measured_us", "rel_error");
  for (const plan::PointError& p : e.points) {
    const plan::ShmMeasurement& m = p.measurement;
    std::printf("  %5d  %-8s  %6d  %-3s  %10zu  %12.2f  %12.2f  %+8.1f%%\n", m.nranks,
                coll::all_reduce_algorithm_name(m.algorithm), m.excess_ranks,
                m.in_place ? "ip" : "oop", m.bytes, p.predicted_us, m.measured_us,
                100 * p.rel_error);
  }
}

void print_text(const Options& o, const Data& d, const plan::ShmFit& fit,
                const plan::Evaluation& held) {
  std::printf("# tpf plan calibrate: %zu bench files, slot %zu B\n", o.bench_files.size(),
              d.slot_bytes);
  for (const std::string& note : d.notes) std::printf("# note: %s\n", note.c_str());
  std::printf("# training set: N in {%s}, bytes <= %zu: %zu points; held out: %zu points\n",
              ranks_text(o.train_ranks).c_str(), o.train_max_bytes, d.training.size(),
              d.held_out.size());
  std::printf("\nfitted constants (training median |error| %s, max %s):\n",
              percent(fit.train_median_rel_error).c_str(),
              percent(fit.train_max_rel_error).c_str());
  std::printf("  %s\n", env_overrides(fit.cost).c_str());
  std::string fitted;
  for (plan::ShmParameter p : fit.fitted) fitted += std::string(" ") + plan::to_string(p);
  std::printf("  fitted:%s\n", fitted.c_str());
  for (const std::string& note : fit.notes) std::printf("  note: %s\n", note.c_str());
  if (fit.constrained) std::printf("  WARNING: a coefficient was constrained to 0 (see notes)\n");
  print_points("training points", plan::evaluate(fit.cost, d.training, d.slot_bytes));

  if (held.points.empty()) {
    std::printf("\nno held-out points: every measurement was in the training set\n");
    return;
  }
  print_points("held-out points", held);
  std::printf("\nheld-out |error| by group:\n");
  for (const auto& [key, group] : by_group(held)) {
    std::printf("  N=%d %-8s  %3zu points  median %8s  max %8s\n", key.first, key.second.c_str(),
                group.errors.size(), percent(plan::median(group.errors)).c_str(),
                percent(*std::max_element(group.errors.begin(), group.errors.end())).c_str());
  }
  const plan::ShmMeasurement& worst = held.points[held.max_index].measurement;
  std::printf("\nheld-out: %zu points, median |error| %s, max %s (N=%d %s %zu B)\n",
              held.points.size(), percent(held.median_abs_rel_error).c_str(),
              percent(held.max_abs_rel_error).c_str(), worst.nranks,
              coll::all_reduce_algorithm_name(worst.algorithm), worst.bytes);
}

json::Value point_json(const plan::PointError& p) {
  const plan::ShmMeasurement& m = p.measurement;
  json::Value v;
  v.set("nranks", m.nranks);
  v.set("algorithm", coll::all_reduce_algorithm_name(m.algorithm));
  v.set("excess_ranks", m.excess_ranks);
  v.set("in_place", m.in_place);
  v.set("bytes", m.bytes);
  v.set("predicted_us", p.predicted_us);
  v.set("measured_us", m.measured_us);
  v.set("rel_error", p.rel_error);
  return v;
}

void print_json(const Options& o, const Data& d, const plan::ShmFit& fit,
                const plan::Evaluation& held) {
  json::Value out;
  out.set("slot_bytes", d.slot_bytes);
  json::Array files;
  for (const std::string& f : o.bench_files) files.emplace_back(f);
  out.set("bench_files", std::move(files));
  json::Value train;
  json::Array ranks;
  for (int n : o.train_ranks) ranks.emplace_back(n);
  train.set("ranks", std::move(ranks));
  train.set("max_bytes", o.train_max_bytes);
  train.set("points", d.training.size());
  train.set("median_rel_error", fit.train_median_rel_error);
  train.set("max_rel_error", fit.train_max_rel_error);
  out.set("training", std::move(train));
  json::Value cost;
  cost.set("step_us", fit.cost.step_us);
  cost.set("step_us_per_excess_rank", fit.cost.step_us_per_excess_rank);
  cost.set("copy_gbps", fit.cost.copy_gbps);
  cost.set("reduce_gbps", fit.cost.reduce_gbps);
  out.set("cost", std::move(cost));
  json::Array fitted;
  for (plan::ShmParameter p : fit.fitted) fitted.emplace_back(plan::to_string(p));
  out.set("fitted", std::move(fitted));
  out.set("constrained", fit.constrained);
  out.set("env", env_overrides(fit.cost));
  json::Array notes;
  for (const std::string& n : d.notes) notes.emplace_back(n);
  for (const std::string& n : fit.notes) notes.emplace_back(n);
  out.set("notes", std::move(notes));
  json::Value h;
  h.set("points", held.points.size());
  if (held.points.empty()) {
    h.set("median_rel_error", nullptr);
    h.set("max_rel_error", nullptr);
  } else {
    h.set("median_rel_error", held.median_abs_rel_error);
    h.set("max_rel_error", held.max_abs_rel_error);
  }
  json::Array points;
  for (const plan::PointError& p : held.points) points.push_back(point_json(p));
  h.set("table", std::move(points));
  out.set("held_out", std::move(h));
  std::printf("%s\n", json::dump(out).c_str());
}

int calibrate(const Options& o) {
  const Data d = load(o);
  const plan::ShmFit fit = plan::fit_shm_link_cost(
      d.training, d.slot_bytes, detail::resolve_comm_settings().tuning.link_cost);
  const plan::Evaluation held = plan::evaluate(fit.cost, d.held_out, d.slot_bytes);
  if (o.json) {
    print_json(o, d, fit, held);
  } else {
    print_text(o, d, fit, held);
  }
  return kExitOk;
}

}  // namespace

void add_plan_calibrate_command(Command& plan) {
  Command command =
      plan.add_subcommand("calibrate", "fit the shared-memory link class to tpf bench results");
  command.footer(kDescription);
  auto flags = std::make_shared<CalibrateFlags>();
  command
      .add_option("--bench", flags->bench_files,
                  "`tpf bench all_reduce --json` output with the top-level keys\n"
                  "\"algorithm\", \"oversubscribed\", \"slot_bytes\" and \"cpus\" added,\n"
                  "as bench/plan/calibrate.sh writes them (repeat for several files)")
      .type_name("FILE.json")
      .allow_extra_args(false);  // one file per --bench, as before
  command
      .add_option("--train-max-bytes", flags->train_max_bytes,
                  "largest message size of the training set (default 64K)")
      .type_name("N");
  command
      .add_option("--train-ranks", flags->train_ranks,
                  "rank counts of the training set (default 2)")
      .type_name("2[,3...]");
  command
      .add_option("--placement", flags->placement,
                  "out-of-place (oop, default), in-place (ip) or both rows")
      .type_name("oop|ip|both");
  command.add_flag("--json", flags->json, "print the result as one JSON object instead of text");
  set_action(command, [flags] { return calibrate(options(*flags)); });
}

}  // namespace tpf::cli
