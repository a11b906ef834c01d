// `tpf plan`: predicts a training step of a model under a parallel layout on a cluster (or ranks
// every layout), and collectives on that cluster's network. Thin: takes the options, calls
// src/plan, prints.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "cli/bench_spec.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/host_cluster.h"
#include "cli/option_values.h"
#include "cli/plan_calibrate_cmd.h"
#include "cli/plan_calibrate_network_cmd.h"
#include "formats/json.h"
#include "plan/collective_planner.h"
#include "plan/layout_search.h"
#include "plan/model_spec.h"
#include "plan/plan_report.h"
#include "tpf/error.h"

namespace tpf::cli {
namespace {

// The command lines as given (unset: not given); converted where they are used.
struct PlanFlags {
  std::optional<std::string> cluster;
  std::optional<std::string> gpus;
  std::optional<std::string> hosts;
  std::optional<std::string> model;
  std::optional<std::string> layout;
  std::optional<std::string> global_batch;
  bool search = false;
  bool allow_batch_rounding = false;
  std::optional<std::string> framework;
  std::optional<std::string> top;
  std::optional<std::string> svg;
  bool json = false;
};

struct CollectiveFlags {
  std::optional<std::string> cluster;
  std::optional<std::string> gpus;
  std::optional<std::string> hosts;
  std::optional<std::string> op;
  std::string bytes;
  std::optional<std::string> factor;
  std::optional<std::string> ranks;
  std::optional<std::string> stride;
  bool json = false;
};

struct ShowFlags {
  std::string name;                   // a preset or a file, given as the argument
  std::optional<std::string> option;  // or as --cluster / --model, as `tpf plan` takes it
  std::optional<std::string> gpus;
  std::optional<std::string> hosts;
};

std::vector<double> parse_sizes(const std::string& text, int factor) {
  auto one = [&](const std::string& item) {
    const auto bytes = parse_byte_size(item);
    if (!bytes || *bytes == 0) {
      throw UsageError("--bytes expects sizes such as 8K, 64M or 1G, or a range 8K:1G; got '" +
                       item + "'");
    }
    return static_cast<double>(*bytes);
  };
  std::vector<double> sizes;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    const double first = one(text.substr(0, colon)), last = one(text.substr(colon + 1));
    if (last < first) throw UsageError("--bytes range '" + text + "' ends before it starts");
    for (double b = first; b <= last; b *= factor) sizes.push_back(b);
    return sizes;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    sizes.push_back(one(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

// A whole-number flag within [min_value, max_value], named in the error otherwise.
int bounded_int(const std::optional<std::string>& text, const std::string& flag, int fallback,
                int min_value, long long max_value) {
  const int64_t value = integer_option(text, flag, fallback, min_value);
  if (value > max_value) {
    throw UsageError(flag + " " + std::to_string(value) + " is above its limit of " +
                     std::to_string(max_value));
  }
  return static_cast<int>(value);
}

// The value of an option of `tpf plan` itself, which CLI11 cannot require: it has subcommands.
const std::string& required(const std::optional<std::string>& text, const std::string& flag) {
  if (!text) throw UsageError(flag + " is required");
  return *text;
}

// --hosts H: this-host as H emulated hosts sharing this machine's cores.
HostSpread emulated_hosts(const std::optional<std::string>& hosts) {
  return {bounded_int(hosts, "--hosts", 1, 1, plan::kMaxClusterGpus), 1};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(ErrorCode::system, "cannot write " + path);
}

int show(const ShowFlags& flags, bool cluster) {
  const char* option = cluster ? "--cluster" : "--model";
  if (flags.option && !flags.name.empty() && *flags.option != flags.name) {
    throw UsageError(std::string("give the ") + (cluster ? "cluster" : "model") +
                     " once: as the argument ('" + flags.name + "') or as " + option + " ('" +
                     *flags.option + "')");
  }
  const std::string& name = flags.option ? *flags.option : flags.name;
  if (name.empty()) {
    throw UsageError(std::string(cluster ? "show-cluster" : "show-model") +
                     " needs a preset name or file (as its argument or " + option + ")");
  }
  if (cluster) {
    const int gpus = bounded_int(flags.gpus, "--gpus", 0, 0, plan::kMaxClusterGpus);
    std::fputs(plan::cluster_to_yaml(load_cluster_or_host(name, gpus, emulated_hosts(flags.hosts)))
                   .c_str(),
               stdout);
  } else {
    std::fputs(plan::model_to_yaml(plan::load_model(name)).c_str(), stdout);
  }
  return kExitOk;
}

// How the same step of the collective fares under each routing policy (what ECMP costs).
std::string routing_comparison(const plan::ClusterSpec& cluster, const plan::GroupShape& group,
                               plan::PhaseKind kind) {
  struct Variant {
    const char* name;
    plan::RoutingMode mode;
    int qps;
  };
  const Variant variants[] = {{"ecmp, 1 QP", plan::RoutingMode::ecmp, 1},
                              {"ecmp, 4 QPs", plan::RoutingMode::ecmp, 4},
                              {"adaptive", plan::RoutingMode::adaptive, 1},
                              {"spray", plan::RoutingMode::spray, 1}};
  std::string out = "routing       slowest transfer  mean     worst link (flows)\n";
  for (const Variant& v : variants) {
    plan::ClusterSpec variant = cluster;
    variant.routing.mode = v.mode;
    variant.routing.queue_pairs = v.qps;
    plan::CollectivePlanner planner(variant);
    const plan::NetworkPhase& phase = planner.network_phase(group, kind);
    char line[160];
    std::snprintf(line, sizeof line, "%-13s %7.1f GB/s      %6.1f   ", v.name, phase.min_rate_gbps,
                  phase.mean_rate_gbps);
    out += line;
    // Sprayed traffic is a fluid over every path: there is no per-link flow count.
    std::snprintf(line, sizeof line,
                  v.mode == plan::RoutingMode::spray ? "n/a (fluid)\n" : "%.2f\n",
                  phase.max_link_load);
    out += line;
  }
  return out;
}

int plan_collective(const CollectiveFlags& flags) {
  const int ranks = bounded_int(flags.ranks, "--ranks", 0, 2, plan::kMaxClusterGpus);
  if (ranks < 2) throw UsageError("--ranks is required (at least 2)");
  const int stride = bounded_int(flags.stride, "--stride", 1, 1, plan::kMaxClusterGpus);
  if (static_cast<long long>(ranks) * stride > plan::kMaxClusterGpus) {
    throw UsageError("--ranks x --stride is more than the planner's limit of " +
                     std::to_string(plan::kMaxClusterGpus) + " GPUs");
  }
  const coll::Collective op = coll::parse_collective_op(flags.op.value_or("all_reduce"));
  const std::vector<double> sizes =
      parse_sizes(flags.bytes, bounded_int(flags.factor, "--factor", 4, 2, 1024));
  int gpus = bounded_int(flags.gpus, "--gpus", 0, 0, plan::kMaxClusterGpus);
  if (gpus == 0) gpus = ranks * stride;
  if (*flags.cluster != kHostClusterName) {  // this-host is sized to any rank count
    const int node = plan::load_cluster(*flags.cluster, 0).gpus_per_node;
    if (gpus % node != 0) gpus += node - gpus % node;
  }
  const plan::ClusterSpec cluster =
      load_cluster_or_host(*flags.cluster, gpus, emulated_hosts(flags.hosts));
  if (cluster.total_gpus() % (ranks * stride) != 0) {
    throw UsageError("--ranks " + std::to_string(ranks) + " x --stride " + std::to_string(stride) +
                     " must divide the cluster's " + std::to_string(cluster.total_gpus()) +
                     " GPUs");
  }
  plan::CollectivePlanner planner(cluster);
  const plan::GroupShape group{ranks, stride};
  const bool json_out = flags.json;
  json::Value rows = json::Array{};
  if (!json_out) {
    std::printf("cluster  %s\n", plan::describe_cluster(cluster, planner.topology()).c_str());
    std::printf("group    %d ranks at stride %d (%d copies run at once)\n\n", ranks, stride,
                cluster.total_gpus() / ranks);
    std::printf("%12s  %-22s %12s %11s %11s\n", "size", "algorithm", "time us", "algbw GB/s",
                "busbw GB/s");
  }
  bool crosses = false;
  for (double bytes : sizes) {
    const auto estimates = planner.estimate_all(op, bytes, group);
    for (size_t i = 0; i < estimates.size(); ++i) {
      const plan::CollectiveEstimate& e = estimates[i];
      crosses = crosses || e.crosses_network;
      const double algbw = e.us > 0 ? bytes / (e.us * 1e3) : 0;
      if (json_out) {
        json::Value row = plan::collective_json(e);
        row.set("bytes", bytes);
        row.set("algbw_gbps", algbw);
        row.set("best", i == 0);
        rows.push_back(std::move(row));
      } else {
        std::printf("%12s  %-22s %12.1f %11.1f %11.1f%s\n",
                    i == 0 ? base::format_bytes(bytes, 0).c_str() : "", e.algorithm.c_str(), e.us,
                    algbw, e.busbw_gbps, i == 0 ? "  *" : "");
      }
    }
  }
  const plan::PhaseKind kind =
      op == coll::Collective::send_recv ? plan::PhaseKind::chain : plan::PhaseKind::ring;
  const plan::NetworkPhase& phase = planner.network_phase(group, kind);
  if (json_out) {
    json::Value out = json::Object{};
    out.set("cluster", plan::cluster_json(cluster, planner.topology()));
    out.set("op", coll::collective_name(op));
    out.set("ranks", ranks);
    out.set("stride", stride);
    out.set("estimates", std::move(rows));
    std::printf("%s\n", json::dump(out).c_str());
    return kExitOk;
  }
  std::printf("(* = chosen, as a tuner would)\n\n");
  if (!crosses) {
    std::printf("network: not crossed (the group lives inside one %s domain)\n",
                cluster.scale_up.name.c_str());
    return kExitOk;
  }
  std::printf(
      "network step: %d NIC-to-NIC transfers; the slowest gets %.1f GB/s of the %.1f a "
      "GPU's NICs give alone (mean %.1f); the worst switch link carries %.2f transfers' worth\n\n",
      phase.transfers, phase.min_rate_gbps, phase.nic_gbps, phase.mean_rate_gbps,
      phase.max_link_load);
  std::printf("%s", routing_comparison(cluster, group, kind).c_str());
  return kExitOk;
}

int plan_layouts(const PlanFlags& flags) {
  const bool search = flags.search;
  if (search == flags.layout.has_value()) throw UsageError("give either --layout or --search");
  if (!search && flags.allow_batch_rounding) {
    throw UsageError("--allow-batch-rounding applies to --search (a --layout runs its own batch)");
  }
  if (!search && flags.framework) {
    throw UsageError("--with applies to --search (a --layout takes the same keys itself)");
  }
  const plan::ModelSpec model = plan::load_model(required(flags.model, "--model"));
  const int global_batch = bounded_int(flags.global_batch, "--global-batch", 0, 1, 1'000'000'000);
  const bool json_out = flags.json;
  int gpus = bounded_int(flags.gpus, "--gpus", 0, 1, plan::kMaxClusterGpus);
  plan::Layout layout;
  if (!search) {
    layout = plan::parse_layout(*flags.layout);
    if (global_batch > 0) layout.global_batch = global_batch;
    if (gpus == 0) gpus = static_cast<int>(layout.gpus());  // parse_layout bounds it
  } else if (gpus == 0 && !(flags.cluster && plan::is_cluster_file(*flags.cluster))) {
    // A preset has no size of its own: planning its one-node default would answer another
    // question than the user's.
    throw UsageError("--search needs --gpus (or a cluster file that says how many nodes)" +
                     (flags.cluster ? "; '" + *flags.cluster + "' is a preset" : std::string()));
  }
  const plan::ClusterSpec cluster =
      load_cluster_or_host(required(flags.cluster, "--cluster"), gpus, emulated_hosts(flags.hosts));
  plan::CollectivePlanner planner(cluster);
  if (!search) {
    if (layout.gpus() != cluster.total_gpus()) {
      throw UsageError("--layout uses tp*cp*pp*dp = " + std::to_string(layout.gpus()) +
                       " GPUs but the cluster has " + std::to_string(cluster.total_gpus()));
    }
    const plan::StepEstimate estimate = plan::estimate_step(model, layout, planner);
    if (json_out) {
      json::Value out = json::Object{};
      out.set("cluster", plan::cluster_json(cluster, planner.topology()));
      out.set("model", plan::model_json(model));
      out.set("estimate", plan::step_json(estimate));
      std::printf("%s\n", json::dump(out).c_str());
    } else {
      std::printf("cluster  %s\nmodel    %s\nlayout   %s\n\n%s",
                  plan::describe_cluster(cluster, planner.topology()).c_str(),
                  plan::describe_model(model).c_str(), estimate.layout.to_string().c_str(),
                  plan::step_table(estimate, cluster).c_str());
    }
    return kExitOk;
  }
  plan::SearchOptions options;
  options.global_batch = global_batch;
  options.allow_batch_rounding = flags.allow_batch_rounding;
  if (flags.framework) options.framework = plan::parse_framework_options(*flags.framework);
  const plan::SearchResult result = plan::search_layouts(model, planner, options);
  const size_t rows = static_cast<size_t>(bounded_int(flags.top, "--top", 15, 1, 1'000'000));
  if (flags.svg) {
    write_file(*flags.svg,
               plan::search_svg(result, rows,
                                model.name + " on " + std::to_string(cluster.total_gpus()) + " x " +
                                    cluster.gpu.name + " (" + cluster.name + ")"));
  }
  if (json_out) {
    json::Value out = json::Object{};
    out.set("cluster", plan::cluster_json(cluster, planner.topology()));
    out.set("model", plan::model_json(model));
    out.set("search", plan::search_json(result, rows));
    std::printf("%s\n", json::dump(out).c_str());
    return kExitOk;
  }
  std::printf("cluster  %s\nmodel    %s\n\n",
              plan::describe_cluster(cluster, planner.topology()).c_str(),
              plan::describe_model(model).c_str());
  std::printf("%d layouts predicted, %d fit in memory (%d impossible combinations skipped)\n",
              result.evaluated, result.fitting, result.rejected);
  std::printf("global batch: %d sequences (%s)", result.asked_batch,
              global_batch > 0 ? "--global-batch" : "the model's");
  if (result.rounded_up > 0) {
    std::printf(
        "; %d layouts run more, rounded up to a multiple of dp (--allow-batch-rounding: a "
        "larger batch shrinks the bubble and the exposed DP time, so they are not compared at "
        "one batch)",
        result.rounded_up);
  }
  if (result.batch_skipped > 0) {
    std::printf(
        "; %d layouts skipped because dp x micro-batch does not divide it "
        "(--allow-batch-rounding runs them at a larger batch)",
        result.batch_skipped);
  }
  std::printf("\n");
  std::printf("\n");
  std::printf("%s\n", plan::search_table(result, rows).c_str());
  for (const std::string& line : result.why_best) std::printf("- %s\n", line.c_str());
  if (flags.svg) std::printf("\nchart: %s\n", flags.svg->c_str());
  return kExitOk;
}

constexpr const char* kPlanDescription =
    "Predicts how a model trains under a tensor / pipeline / data-parallel layout on a cluster,\n"
    "or ranks every layout, from closed-form collective costs, a flow-level network model and\n"
    "a training-step model (docs/plan.md):\n"
    "  tpf plan --cluster C [--gpus N] --model M --layout L [--json]\n"
    "  tpf plan --cluster C --gpus N --model M --search [--top K] [--svg FILE] [--json]";

constexpr const char* kHostsHelp =
    "this-host as H emulated hosts sharing this machine's cores (scripts/emulated-hosts.sh),\n"
    "each with one link of TPF_NET_GBPS GB/s (default 12.5); default 1 host";

// --cluster C (returned, for a command that requires it), --gpus N and --hosts H.
CommandOption add_cluster_options(Command& command, std::optional<std::string>& cluster,
                                  std::optional<std::string>& gpus,
                                  std::optional<std::string>& hosts, const std::string& gpus_help) {
  CommandOption option =
      command
          .add_option("--cluster", cluster,
                      "a preset (dgx-h100, dgx-a100, h100-ethernet), this-host (this machine's\n"
                      "cores as tpf train uses them, measured now: docs/model.md) or a YAML file")
          .type_name("C");
  command.add_option("--gpus", gpus, gpus_help).type_name("N");
  command.add_option("--hosts", hosts, kHostsHelp).type_name("H");
  return option;
}

void add_collective_command(Command& plan) {
  Command command = plan.add_subcommand(
      "collective", "predict a collective's algorithms and what routing does to it");
  command.footer(
      "Predicts every algorithm of the collective for a group of --ranks GPUs, --stride apart\n"
      "(copies of the group run at once on the rest of the cluster), and how the group's\n"
      "network step fares under each routing policy.");
  auto flags = std::make_shared<CollectiveFlags>();
  add_cluster_options(command, flags->cluster, flags->gpus, flags->hosts,
                      "size a preset (a multiple of 8; default: --ranks x --stride)")
      .required();
  command
      .add_option("--op", flags->op,
                  "all_reduce (default), all_gather, reduce_scatter, broadcast,\n"
                  "all_to_all, send_recv")
      .type_name("OP");
  command.add_option("--bytes", flags->bytes, "1M,64M or a range 8K:1G; suffixes K M G")
      .type_name("SIZES")
      .required();
  command.add_option("--factor", flags->factor, "step of a --bytes range (default 4)")
      .type_name("F");
  command.add_option("--ranks", flags->ranks, "group size (at least 2)").type_name("R");
  command.add_option("--stride", flags->stride, "GPUs between members (1 = packed in a node)")
      .type_name("S");
  command.add_flag("--json", flags->json, "machine-readable output instead of tables");
  set_action(command, [flags] { return plan_collective(*flags); });
}

void add_show_commands(Command& plan) {
  Command cluster =
      plan.add_subcommand("show-cluster", "print a cluster as YAML (a starting point)");
  auto cluster_flags = std::make_shared<ShowFlags>();
  cluster.add_option("name", cluster_flags->name, "a preset or a YAML file").type_name("C");
  cluster.add_option("--cluster", cluster_flags->option, "the same, as `tpf plan` takes it")
      .type_name("C");
  cluster.add_option("--gpus", cluster_flags->gpus, "size a preset (a multiple of 8)")
      .type_name("N");
  cluster.add_option("--hosts", cluster_flags->hosts, kHostsHelp).type_name("H");
  set_action(cluster, [cluster_flags] { return show(*cluster_flags, true); });

  Command model = plan.add_subcommand("show-model", "print a model as YAML");
  auto model_flags = std::make_shared<ShowFlags>();
  model.add_option("name", model_flags->name, "a preset or a YAML file").type_name("M");
  model.add_option("--model", model_flags->option, "the same, as `tpf plan` takes it")
      .type_name("M");
  set_action(model, [model_flags] { return show(*model_flags, false); });
}

}  // namespace

void add_plan_command(Command& tpf) {
  Command plan =
      tpf.add_subcommand("plan", "predict a model's training step on a cluster, rank layouts");
  plan.require_subcommand(0, 1);
  auto flags = std::make_shared<PlanFlags>();
  add_cluster_options(
      plan, flags->cluster, flags->gpus, flags->hosts,
      "size a preset (a multiple of 8; this-host: its ranks); with --layout, defaults\n"
      "to tp*cp*pp*dp");
  std::string presets;
  for (const std::string& name : plan::model_preset_names()) {
    presets += (presets.empty() ? "" : ", ") + name;
  }
  plan.add_option("--model", flags->model, "a preset (" + presets + ") or a YAML file")
      .type_name("M");
  plan.add_option("--layout", flags->layout,
                  "tp=8,pp=8,dp=16[,cp=2][,ep=8][,mb=1][,gb=1536][,sp=1][,vp=2]\n"
                  "[,recompute=none|selective|full][,zero=0..3][,order=tp-dp-pp]\n"
                  "[,precision=bf16|fp8|fp32][,attention=flash|materialized]\n"
                  "[,overlap=tp+pp+dp_grads+dp_params|none][,first=N][,last=N]\n"
                  "[,bucket=N] [,capacity=1.25] (ep, capacity: mixture-of-experts models)")
      .type_name("L");
  plan.add_option("--global-batch", flags->global_batch,
                  "sequences per step (default: the model's); --search runs every layout\n"
                  "at it (see --allow-batch-rounding)")
      .type_name("B");
  plan.add_flag("--search", flags->search, "rank every layout that multiplies to --gpus");
  plan.add_flag("--allow-batch-rounding", flags->allow_batch_rounding,
                "--search: run a layout whose dp x micro-batch does not divide the batch at\n"
                "the batch rounded up to a multiple of dp (default: skip it)");
  plan.add_option("--with", flags->framework,
                  "--search: what the framework does, for every layout:\n"
                  "precision=..., attention=..., overlap=... (as in --layout)")
      .type_name("OPTS");
  plan.add_option("--top", flags->top, "rows of the ranking to print and draw (default 15)")
      .type_name("K");
  plan.add_option("--svg", flags->svg, "draw the ranking with each layout's breakdown")
      .type_name("FILE");
  plan.add_flag("--json", flags->json, "machine-readable output instead of tables");
  set_action(plan, [flags] { return plan_layouts(*flags); });
  add_collective_command(plan);
  add_plan_calibrate_command(plan);
  add_plan_calibrate_network_command(plan);
  add_show_commands(plan);
  plan.footer(kPlanDescription);  // after the subcommands: they would inherit it
}

}  // namespace tpf::cli
