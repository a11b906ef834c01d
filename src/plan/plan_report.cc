#include "plan/plan_report.h"

#include <algorithm>
#include <sstream>

#include "formats/svg.h"
#include "plan/text_format.h"

namespace tpf::plan {
namespace {

std::string describe_collective(const char* what, const CollectiveEstimate& e) {
  // A group of one GPU (dp = 1, tp = 1) has nothing to exchange: no algorithm, no time.
  if (e.algorithm.empty()) return format("  %-22s none (a group of one GPU)\n", what);
  std::string text =
      format("  %-22s %s, %.1f us, busbw %.1f GB/s", what, e.algorithm.c_str(), e.us, e.busbw_gbps);
  if (e.crosses_network) {
    text += format("; network: slowest transfer %.1f of %.1f GB/s, worst link %.2f flows",
                   e.network.min_rate_gbps, e.network.nic_gbps, e.network.max_link_load);
  }
  return text + "\n";
}

}  // namespace

std::string describe_cluster(const ClusterSpec& c, const FabricTopology& topology) {
  return format(
             "%s: %d GPUs (%d nodes x %d %s, %.3g TFLOP/s, %.0f GB), %s %.0f GB/s, %d x %.0f "
             "Gb/s NICs, routing %s (seed %llu, %d QP)\n  network: ",
             c.name.c_str(), c.total_gpus(), c.nodes, c.gpus_per_node, c.gpu.name.c_str(),
             c.gpu.peak_tflops, c.gpu.memory_gb, c.scale_up.name.c_str(), c.scale_up.bandwidth_gbps,
             c.nics_per_node, c.nic_gbits, to_string(c.routing.mode),
             static_cast<unsigned long long>(c.routing.seed), c.routing.queue_pairs) +
         topology.summary();
}

std::string describe_model(const ModelSpec& m) {
  std::string text = format(
      "%s: %.2fB parameters, %d layers, hidden %d, %d heads, FFN %d, sequence %d, vocab %d",
      m.name.c_str(), m.parameters() / 1e9, m.layers, m.hidden, m.heads, m.ffn(), m.seq_len,
      m.vocab);
  if (m.moe()) {
    text += format("; %d experts, %d per token (%.2fB parameters active)", m.experts,
                   m.active_experts(), m.active_parameters() / 1e9);
  }
  return text;
}

std::string step_table(const StepEstimate& e, const ClusterSpec& cluster) {
  std::string out;
  out += format("step time          %.3f s\n", e.step_s);
  out += format("throughput         %.0f tokens/s, MFU %.1f %%, GEMM efficiency %.1f %%\n",
                e.tokens_per_s, 100 * e.mfu, 100 * e.gemm_efficiency);
  const MemoryEstimate& m = e.memory;
  out += format(
      "memory per GPU     %.1f GB of %.0f GB%s (weights %.1f, gradients %.1f, optimizer "
      "%.1f, activations %.1f, other %.1f)\n",
      m.total_gb(), cluster.gpu.memory_gb, e.fits ? "" : " - DOES NOT FIT", m.weights_gb,
      m.gradients_gb, m.optimizer_gb, m.activations_gb, m.other_gb);
  out += "breakdown\n";
  for (const BreakdownPart& part : kBreakdownParts) {
    const double s = e.breakdown.*part.seconds;
    out += format("  %-18s %9.3f s  %5.1f %%\n", part.name, s, 100 * s / e.step_s);
  }
  out += format(
      "  (DP gradient reduction takes %.3f s in all; %.3f s of it hides behind the backward "
      "pass)\n",
      e.dp_comm_s, std::max(0.0, e.dp_comm_s - e.breakdown.dp_exposed_s));
  out += "collectives\n";
  out += describe_collective("TP (one, per layer)", e.tp_all_reduce);
  out += describe_collective("DP gradients", e.dp_reduction);
  for (const std::string& note : e.notes) out += "note: " + note + "\n";
  return out;
}

json::Value collective_json(const CollectiveEstimate& e) {
  json::Value v = json::Object{};
  v.set("algorithm", e.algorithm);
  v.set("us", e.us);
  v.set("busbw_gbps", e.busbw_gbps);
  v.set("crosses_network", e.crosses_network);
  if (e.crosses_network) {
    json::Value net = json::Object{};
    net.set("transfers", e.network.transfers);
    net.set("min_rate_gbps", e.network.min_rate_gbps);
    net.set("mean_rate_gbps", e.network.mean_rate_gbps);
    net.set("nic_gbps", e.network.nic_gbps);
    net.set("max_link_load", e.network.max_link_load);
    net.set("latency_us", e.network.latency_us);
    v.set("network", std::move(net));
  }
  return v;
}

json::Value step_json(const StepEstimate& e) {
  json::Value v = json::Object{};
  v.set("layout", e.layout.to_string());
  v.set("step_s", e.step_s);
  v.set("tokens_per_s", e.tokens_per_s);
  v.set("mfu", e.mfu);
  v.set("gemm_efficiency", e.gemm_efficiency);
  v.set("fits", e.fits);
  json::Value breakdown = json::Object{};
  breakdown.set("compute_s", e.breakdown.compute_s);
  breakdown.set("tp_comm_s", e.breakdown.tp_comm_s);
  breakdown.set("cp_comm_s", e.breakdown.cp_comm_s);
  breakdown.set("ep_comm_s", e.breakdown.ep_comm_s);
  breakdown.set("pp_comm_s", e.breakdown.pp_comm_s);
  breakdown.set("pp_bubble_s", e.breakdown.pp_bubble_s);
  breakdown.set("dp_exposed_s", e.breakdown.dp_exposed_s);
  breakdown.set("optimizer_s", e.breakdown.optimizer_s);
  v.set("breakdown", std::move(breakdown));
  v.set("dp_comm_s", e.dp_comm_s);
  json::Value memory = json::Object{};
  memory.set("weights_gb", e.memory.weights_gb);
  memory.set("gradients_gb", e.memory.gradients_gb);
  memory.set("optimizer_gb", e.memory.optimizer_gb);
  memory.set("activations_gb", e.memory.activations_gb);
  memory.set("other_gb", e.memory.other_gb);
  memory.set("total_gb", e.memory.total_gb());
  v.set("memory", std::move(memory));
  v.set("tp_collective", collective_json(e.tp_all_reduce));
  v.set("dp_reduction", collective_json(e.dp_reduction));
  json::Value notes = json::Array{};
  for (const std::string& note : e.notes) notes.push_back(note);
  v.set("notes", std::move(notes));
  return v;
}

json::Value cluster_json(const ClusterSpec& c, const FabricTopology& topology) {
  json::Value v = json::Object{};
  v.set("name", c.name);
  v.set("gpus", c.total_gpus());
  v.set("nodes", c.nodes);
  v.set("gpu", c.gpu.name);
  v.set("network", topology.summary());
  v.set("routing", to_string(c.routing.mode));
  v.set("routing_seed", static_cast<int64_t>(c.routing.seed));
  v.set("queue_pairs", c.routing.queue_pairs);
  return v;
}

json::Value model_json(const ModelSpec& m) {
  json::Value v = json::Object{};
  v.set("name", m.name);
  v.set("parameters", m.parameters());
  v.set("layers", m.layers);
  v.set("hidden", m.hidden);
  v.set("heads", m.heads);
  v.set("ffn_hidden", m.ffn());
  v.set("seq_len", m.seq_len);
  v.set("vocab", m.vocab);
  v.set("experts", m.moe() ? m.experts : 0);
  v.set("experts_per_token", m.active_experts());
  v.set("active_parameters", m.active_parameters());
  return v;
}

std::string search_table(const SearchResult& result, size_t rows) {
  std::string out = format("%-4s %-62s %12s %6s %8s %8s  %s\n", "rank", "layout", "tokens/s",
                           "MFU%", "step s", "GB/GPU", "largest non-compute part");
  for (size_t i = 0; i < std::min(rows, result.ranked.size()); ++i) {
    const StepEstimate& e = result.ranked[i];
    const char* worst = "none";
    double worst_s = 0;
    for (const BreakdownPart& part : kBreakdownParts) {
      if (part.seconds == &StepBreakdown::compute_s) continue;
      if (e.breakdown.*part.seconds > worst_s) {
        worst_s = e.breakdown.*part.seconds;
        worst = part.name;
      }
    }
    out += format("%-4zu %-62s %12.0f %6.1f %8.3f %8.1f%s  %s %.0f%%\n", i + 1,
                  e.layout.to_string().c_str(), e.tokens_per_s, 100 * e.mfu, e.step_s,
                  e.memory.total_gb(), e.fits ? " " : "!", worst, 100 * worst_s / e.step_s);
  }
  return out;
}

json::Value search_json(const SearchResult& result, size_t rows) {
  json::Value v = json::Object{};
  v.set("evaluated", result.evaluated);
  v.set("fitting", result.fitting);
  v.set("rejected", result.rejected);
  v.set("asked_global_batch", result.asked_batch);
  v.set("layouts_with_larger_batch", result.rounded_up);
  v.set("layouts_skipped_for_the_batch", result.batch_skipped);
  json::Value why = json::Array{};
  for (const std::string& line : result.why_best) why.push_back(line);
  v.set("why_best", std::move(why));
  json::Value ranked = json::Array{};
  for (size_t i = 0; i < std::min(rows, result.ranked.size()); ++i) {
    ranked.push_back(step_json(result.ranked[i]));
  }
  v.set("ranked", std::move(ranked));
  return v;
}

std::string search_svg(const SearchResult& result, size_t rows, const std::string& title) {
  const size_t n = std::min(rows, result.ranked.size());
  // Room for the longest label at about 6.5 px per character of the 11 px font, and for the
  // tokens/s figure after the longest bar.
  size_t longest_label = 0;
  for (size_t i = 0; i < n; ++i) {
    longest_label = std::max(longest_label, result.ranked[i].layout.to_string().size() + 6);
  }
  const double left = 20 + 6.5 * static_cast<double>(longest_label), right = 130, top = 60;
  const double bar = 18, gap = 6, width = left + 700 + right;
  const double height = top + n * (bar + gap) + 70;
  // Seconds per million tokens: comparable across layouts with different global batches.
  auto per_million = [](const StepEstimate& e, double seconds) {
    return seconds / (e.tokens_per_s * e.step_s) * 1e6;
  };
  double longest = 0;
  for (size_t i = 0; i < n; ++i) {
    longest = std::max(longest, per_million(result.ranked[i], result.ranked[i].step_s));
  }
  const double scale = longest > 0 ? (width - left - right) / longest : 0;
  std::ostringstream svg;
  svg << svg::begin(width, height, 11) << svg::title(left, 22, "start", title);
  svg << format(
      "<text x=\"%.0f\" y=\"40\" fill=\"#555\">seconds per million tokens (shorter is "
      "faster), best layout at the top; ! = does not fit in memory</text>\n",
      left);
  for (size_t i = 0; i < n; ++i) {
    const StepEstimate& e = result.ranked[i];
    const double y = top + i * (bar + gap);
    svg << format("<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, y + bar - 5)
        << svg::escape(format("%zu. %s%s", i + 1, e.layout.to_string().c_str(), e.fits ? "" : " !"))
        << "</text>\n";
    double x = left;
    for (const BreakdownPart& part : kBreakdownParts) {
      const double w = per_million(e, e.breakdown.*part.seconds) * scale;
      if (w <= 0) continue;
      svg << format("<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"/>\n", x,
                    y, w, bar, part.color);
      x += w;
    }
    svg << format("<text x=\"%.1f\" y=\"%.1f\" fill=\"#333\">%.0f tok/s</text>\n", x + 4,
                  y + bar - 5, e.tokens_per_s);
  }
  double legend_x = left;
  const double legend_y = top + n * (bar + gap) + 25;
  for (const BreakdownPart& part : kBreakdownParts) {
    svg << format("<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>", legend_x,
                  legend_y, part.color)
        << format("<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", legend_x + 16, legend_y + 10,
                  part.name);
    legend_x += 140;
  }
  svg << svg::kEnd;
  return svg.str();
}

}  // namespace tpf::plan
