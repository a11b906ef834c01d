#include "cli/bench_table.h"

#include <cmath>
#include <sstream>

#include "coll/network_cost.h"

namespace tpf::cli {
namespace {

// Keeps about 4 significant digits in a fixed-width column however large the time grows.
std::string format_time(double us) {
  char buf[32];
  if (us < 1000.0) {
    std::snprintf(buf, sizeof buf, "%8.2f", us);
  } else if (us < 1e7) {
    std::snprintf(buf, sizeof buf, "%8.0f", us);
  } else {
    std::snprintf(buf, sizeof buf, "%8.2e", us);
  }
  return buf;
}

void print_measurement(std::FILE* out, const std::optional<Measurement>& m) {
  if (!m) {
    std::fprintf(out, "  %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  char wrong[24];
  if (m->wrong) {
    std::snprintf(wrong, sizeof wrong, "%llu", static_cast<unsigned long long>(*m->wrong));
  } else {
    std::snprintf(wrong, sizeof wrong, "N/A");
  }
  std::fprintf(out, "  %s %7.2f %7.2f %6s", format_time(m->time_us).c_str(), m->algbw, m->busbw,
               wrong);
}

// JSON numbers must be finite; a zero-time measurement never produces inf (see
// make_measurement) but guard anyway so the file always parses.
void json_number(std::ostringstream& os, double v) {
  if (!std::isfinite(v)) {
    os << "null";
    return;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  os << buf;
}

// null for a placement that was not measured.
void json_measurement(std::ostringstream& os, const std::optional<Measurement>& measured) {
  if (!measured) {
    os << "null";
    return;
  }
  const Measurement& m = *measured;
  os << "{\"time_us\":";
  json_number(os, m.time_us);
  os << ",\"algbw\":";
  json_number(os, m.algbw);
  os << ",\"busbw\":";
  json_number(os, m.busbw);
  os << ",\"wrong\":";
  if (m.wrong) {
    os << *m.wrong;
  } else {
    os << "null";
  }
  os << "}";
}

// The header's words for how the calls were made and waited for.
const char* async_heading(const BenchReport& r) {
  if (!r.async_calls) return "";
  switch (r.async_wait) {
    case AsyncWait::wait: return ", async";
    case AsyncWait::timed: return ", async, timed waits";
    case AsyncWait::poll: return ", async, polled";
  }
  return "";
}

}  // namespace

Measurement make_measurement(Collective c, int nranks, size_t bytes, double time_us,
                             std::optional<uint64_t> wrong) {
  Measurement m;
  m.time_us = time_us;
  m.wrong = wrong;
  if (time_us > 0.0) {
    // bytes / us = MB/s; / 1e3 -> GB/s.
    m.algbw = static_cast<double>(bytes) / time_us / 1e3;
    m.busbw = m.algbw * coll::bus_bandwidth_factor(c, nranks);
  }
  return m;
}

void print_table_header(std::FILE* out, const BenchReport& r) {
  std::fprintf(out, "# tpf bench %s: nranks %d, dtype %s, op %s, root %d, iters %d, warmup %d%s",
               collective_name(r.collective), r.nranks, r.dtype.c_str(), r.op.c_str(), r.root,
               r.iters, r.warmup, async_heading(r));
  if (r.compute_us > 0) {
    std::fprintf(out, ", %d us of compute per call %s (left out of the times)", r.compute_us,
                 r.async_calls ? "between issue and wait" : "before it");
  }
  std::fprintf(out, "\n");
  if (r.setup_ms >= 0) {
    std::fprintf(out, "# communicator created in %.0f ms (the slowest rank)\n", r.setup_ms);
  }
  if (r.hosts > 1) {
    std::fprintf(
        out, "# across %d hosts, network algorithm %s (one round up to %zu KiB a message)\n",
        r.hosts, coll::has_per_rail_form(r.collective) ? r.network_algorithm.c_str() : "pipelined",
        coll::network_packed_bytes(r.collective) >> 10);
  }
  std::fprintf(out, "#\n");
  std::fprintf(out, "# %48s  %-33s  %s\n", "", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %8s %7s %7s %6s  %8s %7s %7s %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %8s %7s %7s %6s  %8s %7s %7s %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
  std::fflush(out);
}

void print_table_row(std::FILE* out, const BenchReport& r, const BenchRow& row) {
  std::fprintf(out, "  %10zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, r.dtype.c_str(),
               r.op.c_str(), r.root);
  print_measurement(out, row.oop);
  print_measurement(out, row.ip);
  std::fprintf(out, "\n");
  std::fflush(out);  // rows appear as they are measured, even through a pipe
}

double average_busbw(const BenchReport& r) {
  double sum = 0.0;
  int n = 0;
  for (const auto& row : r.rows) {
    for (const std::optional<Measurement>& m : {row.oop, row.ip}) {
      if (!m) continue;
      sum += m->busbw;
      ++n;
    }
  }
  return n == 0 ? 0.0 : sum / n;
}

uint64_t total_wrong(const BenchReport& r) {
  uint64_t wrong = 0;
  for (const auto& row : r.rows) {
    for (const std::optional<Measurement>& m : {row.oop, row.ip}) {
      if (m) wrong += m->wrong.value_or(0);
    }
  }
  return wrong;
}

void print_table_footer(std::FILE* out, const BenchReport& r) {
  const uint64_t wrong = total_wrong(r);
  std::fprintf(out, "# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong),
               wrong == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g\n", average_busbw(r));
  std::fprintf(out, "#\n");
  std::fflush(out);
}

std::string report_to_json(const BenchReport& r) {
  std::ostringstream os;
  os << "{\"collective\":\"" << collective_name(r.collective) << "\",\"nranks\":" << r.nranks
     << ",\"dtype\":\"" << r.dtype << "\",\"op\":\"" << r.op << "\",\"root\":" << r.root
     << ",\"iters\":" << r.iters << ",\"warmup\":" << r.warmup
     << ",\"async\":" << (r.async_calls ? "true" : "false") << ",\"wait\":\""
     << async_wait_name(r.async_wait) << '"' << ",\"compute_us\":" << r.compute_us;
  if (r.collective == Collective::all_reduce) os << ",\"algorithm\":\"" << r.algorithm << "\"";
  os << ",\"hosts\":" << r.hosts;
  if (r.hosts > 1 && coll::has_network_choice(r.collective)) {
    os << ",\"network_algorithm\":\"" << r.network_algorithm << "\""
       << ",\"network_min_slice_bytes\":" << r.network_min_slice_bytes;
    if (r.collective == Collective::broadcast) {
      os << ",\"network_chain_round_us\":";
      json_number(os, r.network_chain.round_us);
      os << ",\"network_chain_gbps\":";
      json_number(os, r.network_chain.link_gbps);
    }
  }
  os << ",\"slot_bytes\":" << r.slot_bytes << ",\"cpus\":" << r.cpus
     << ",\"excess_ranks\":" << r.excess_ranks
     << ",\"oversubscribed\":" << (r.excess_ranks > 0 ? "true" : "false");
  if (r.loadavg >= 0) {
    os << ",\"loadavg\":";
    json_number(os, r.loadavg);
  }
  if (r.setup_ms >= 0) {
    os << ",\"setup_ms\":";
    json_number(os, r.setup_ms);
  }
  os << ",\"avg_busbw\":";
  json_number(os, average_busbw(r));
  os << ",\"rows\":[";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const BenchRow& row = r.rows[i];
    if (i != 0) os << ",";
    os << "\n  {\"bytes\":" << row.bytes << ",\"count\":" << row.count << ",\"oop\":";
    json_measurement(os, row.oop);
    os << ",\"ip\":";
    json_measurement(os, row.ip);
    os << "}";
  }
  os << "\n]}\n";
  return os.str();
}

}  // namespace tpf::cli
