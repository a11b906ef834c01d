#include "comm/flight_summary.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "transport/rank_names.h"

namespace tpf::detail {
namespace {

using Fields = std::map<std::string_view, std::string_view>;

Fields fields_of(std::string_view line) {
  Fields out;
  size_t at = 0;
  while (at < line.size()) {
    size_t end = line.find(' ', at);
    if (end == std::string_view::npos) end = line.size();
    std::string_view word = line.substr(at, end - at);
    const size_t eq = word.find('=');
    if (eq != std::string_view::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

template <typename T>
bool number(const Fields& f, std::string_view key, T& out) {
  auto it = f.find(key);
  if (it == f.end()) return false;
  const char* first = it->second.data();
  const char* last = first + it->second.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last;
}

std::string text(const Fields& f, std::string_view key) {
  auto it = f.find(key);
  return it == f.end() ? std::string() : std::string(it->second);
}

std::optional<coll::OpKind> parse_kind(std::string_view name) {
  for (int k = 0; k <= static_cast<int>(coll::OpKind::barrier); ++k) {
    if (name == coll::op_kind_name(static_cast<coll::OpKind>(k)))
      return static_cast<coll::OpKind>(k);
  }
  return std::nullopt;
}

std::optional<FlightState> parse_state(std::string_view name) {
  for (FlightState s : {FlightState::in_flight, FlightState::completed, FlightState::failed}) {
    if (name == flight_state_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<ErrorCode> parse_error(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(ErrorCode::internal); ++c) {
    if (name == error_code_token(static_cast<ErrorCode>(c))) return static_cast<ErrorCode>(c);
  }
  return std::nullopt;
}

std::optional<FlightRecord> parse_record(const Fields& f) {
  FlightRecord r;
  auto kind = parse_kind(text(f, "kind"));
  auto dtype = parse_dtype(text(f, "dtype"));
  auto state = parse_state(text(f, "state"));
  if (!kind || !dtype || !state) return std::nullopt;
  if (!number(f, "id", r.id) || !number(f, "seq", r.sequence) || !number(f, "count", r.count) ||
      !number(f, "peer", r.peer) || !number(f, "start_ns", r.start_ns) ||
      !number(f, "end_ns", r.end_ns)) {
    return std::nullopt;
  }
  r.kind = *kind;
  r.dtype = *dtype;
  r.state = *state;
  if (r.state == FlightState::failed) {
    auto error = parse_error(text(f, "error"));
    if (!error) return std::nullopt;
    r.error = *error;
  }
  return r;
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
  return buf;
}

std::string op_text(const FlightRecord& r, const transport::RankNames& names) {
  if (r.kind == coll::OpKind::send) {
    return "send #" + std::to_string(r.sequence) + " to " + names(r.peer);
  }
  if (r.kind == coll::OpKind::recv) {
    return "recv #" + std::to_string(r.sequence) + " from " + names(r.peer);
  }
  return std::string(coll::op_kind_name(r.kind)) + " seq " + std::to_string(r.sequence);
}

std::string state_text(const FlightRecord& r, int64_t now_ns) {
  switch (r.state) {
    case FlightState::in_flight: return "in flight for " + seconds(now_ns - r.start_ns);
    case FlightState::completed: return "completed";
    case FlightState::failed:
      return std::string("failed: ") + error_code_token(r.error) + " after " +
             seconds(r.end_ns - r.start_ns);
  }
  return "unknown";
}

// Where one rank stands among the collectives of its communicator.
struct Position {
  const FlightDump* dump = nullptr;
  const FlightRecord* last_started = nullptr;    // the newest collective record
  const FlightRecord* last_completed = nullptr;  // the newest completed one
  uint64_t next = 0;    // the lowest collective sequence it has not finished
  bool inside = false;  // it is in (or failed in) collective `next`
};

Position position_of(const FlightDump& d) {
  Position p;
  p.dump = &d;
  for (const FlightRecord& r : d.records) {
    if (coll::is_point_to_point(r.kind)) continue;
    if (!p.last_started || r.id > p.last_started->id) p.last_started = &r;
    if (r.state == FlightState::completed && (!p.last_completed || r.id > p.last_completed->id)) {
      p.last_completed = &r;
    }
  }
  if (p.last_started) {
    p.inside = p.last_started->state != FlightState::completed;
    p.next = p.last_started->sequence + (p.inside ? 0 : 1);
  }
  return p;
}

void summarize_communicator(const std::vector<const FlightDump*>& dumps,
                            const std::set<int>& ended_lost, std::vector<std::string>& out) {
  const FlightDump& first = *dumps.front();
  const int size = first.size;
  std::map<int, Position> at;  // by rank
  transport::RankNames names;  // a split's: from any of its dumps (they all carry the same)
  for (const FlightDump* d : dumps) {
    if (d->rank >= 0 && d->rank < size) at[d->rank] = position_of(*d);
    if (static_cast<int>(d->job_ranks.size()) == size) names = transport::RankNames(d->job_ranks);
  }
  auto op_name = [&](const FlightRecord& r) { return op_text(r, names); };
  out.push_back("communicator '" + first.comm + "' (generation " +
                std::to_string(first.generation) + ", " + std::to_string(size) + " ranks, " +
                std::to_string(at.size()) + " dumped):");
  std::set<std::string> hosts;
  for (const auto& [rank, p] : at) hosts.insert(p.dump->host);
  const bool name_hosts = hosts.size() > 1;
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    auto it = at.find(r);
    if (it == at.end()) {
      if (ended_lost.count(names.job_rank(r)) != 0) {
        out.push_back("  " + names(r) + ": no dump (found lost and ended)");
      } else {
        missing.push_back(r);
        out.push_back("  " + names(r) + ": no dump");
      }
      continue;
    }
    const Position& p = it->second;
    const FlightDump& d = *p.dump;
    std::string line = "  rank " + std::to_string(r) + " (";
    if (names.job_rank(r) != r) line += "job rank " + std::to_string(names.job_rank(r)) + ", ";
    line += "pid " + std::to_string(d.pid) +
            (name_hosts ? " on host '" + d.host + "'" : std::string()) + ", dumped on " + d.reason +
            "): ";
    if (!p.last_started) {
      line += "no collective recorded";
    } else {
      line += "last started " + op_name(*p.last_started) + " (" +
              state_text(*p.last_started, d.now_ns) + "); last completed " +
              (p.last_completed ? op_name(*p.last_completed) : std::string("none"));
    }
    for (const FlightRecord& rec : d.records) {
      if (coll::is_point_to_point(rec.kind) && rec.state != FlightState::completed) {
        line += "; " + op_name(rec) + " " + state_text(rec, d.now_ns);
      }
    }
    out.push_back(line);
  }

  // Collectives: the lowest sequence not finished everywhere, and who has not started it.
  if (!at.empty()) {
    uint64_t lowest = UINT64_MAX;
    for (const auto& [r, p] : at) lowest = std::min(lowest, p.next);
    std::vector<int> not_started, inside_lowest, inside_any;
    for (const auto& [r, p] : at) {
      if (p.next == lowest && !p.inside) not_started.push_back(r);
      if (p.next == lowest && p.inside) inside_lowest.push_back(r);
      if (p.inside) inside_any.push_back(r);
    }
    const std::string seq = "collective seq " + std::to_string(lowest);
    if (!not_started.empty() && !inside_any.empty()) {
      std::string line = "  everyone waits for " + names.list(not_started) + ": not started " + seq;
      for (int w : inside_any) {
        line += (w == inside_any.front() ? " (" : ", ") + names(w) + " is in " +
                op_name(*at[w].last_started);
      }
      out.push_back(line + ")");
    } else if (!not_started.empty()) {
      out.push_back("  no rank is inside a collective (each dumped rank finished seq " +
                    (lowest == 0 ? std::string("none") : std::to_string(lowest - 1)) + ")");
    } else {
      std::string line = "  every dumped rank has reached " + seq + ":";
      bool differ = false;
      for (int r : inside_lowest) {
        const FlightRecord& rec = *at[r].last_started;
        const FlightRecord& ref = *at[inside_lowest.front()].last_started;
        differ = differ || rec.kind != ref.kind || rec.count != ref.count ||
                 rec.dtype != ref.dtype || rec.peer != ref.peer;
        line += std::string(r == inside_lowest.front() ? " " : ", ") + names(r) + " " +
                coll::op_kind_name(rec.kind) + "(" + dtype_name(rec.dtype) + " x " +
                std::to_string(rec.count) +
                (rec.peer >= 0 ? ", root " + std::to_string(rec.peer) : std::string()) + ")";
      }
      if (differ) line += "; they called different collectives";
      out.push_back(line);
    }
  }
  if (!missing.empty()) {
    out.push_back("  no dump from " + names.list(missing) +
                  " (exited without one, or did not answer the dump signal)" +
                  (at.empty() ? "" : "; the others may be waiting for it"));
  }

  // Point-to-point: a send or recv whose peer has not posted the matching call.
  for (const auto& [r, p] : at) {
    for (const FlightRecord& rec : p.dump->records) {
      if (!coll::is_point_to_point(rec.kind) || rec.state == FlightState::completed) continue;
      if (rec.peer < 0 || rec.peer >= size) continue;
      auto peer = at.find(rec.peer);
      if (peer == at.end()) continue;
      const coll::OpKind match =
          rec.kind == coll::OpKind::send ? coll::OpKind::recv : coll::OpKind::send;
      std::optional<uint64_t> newest;
      for (const FlightRecord& q : peer->second.dump->records) {
        if (q.kind == match && q.peer == r) newest = std::max(newest.value_or(0), q.sequence);
      }
      if (newest && *newest >= rec.sequence) continue;  // posted: the transfer itself is stuck
      std::string theirs = "none recorded";
      if (newest) {
        theirs = '#';
        theirs += std::to_string(*newest);
      }
      out.push_back("  " + names(r) + " waits for " + names(rec.peer) + ": " + op_name(rec) +
                    ", whose " + coll::op_kind_name(match) + " rank " + std::to_string(rec.peer) +
                    " has not posted (its newest: " + theirs + ")");
    }
  }
}

}  // namespace

FlightFile parse_flight_file(std::string_view content) {
  FlightFile file;
  std::optional<FlightDump> current;
  constexpr std::string_view kTag = "# tpf-flight-recorder ";
  size_t at = 0;
  while (at < content.size()) {
    size_t end = content.find('\n', at);
    if (end == std::string_view::npos) break;  // a line still being written
    std::string_view line = content.substr(at, end - at);
    at = end + 1;
    if (line.rfind("op ", 0) == 0) {
      if (!current) continue;
      if (auto r = parse_record(fields_of(line.substr(3)))) current->records.push_back(*r);
      continue;
    }
    if (line.rfind(kTag, 0) != 0) continue;
    line.remove_prefix(kTag.size());
    const size_t space = line.find(' ');
    const std::string_view keyword = line.substr(0, space);
    const Fields f = fields_of(space == std::string_view::npos ? "" : line.substr(space + 1));
    if (keyword == "armed") {
      int64_t pid = 0;
      int sig = 0;
      if (number(f, "pid", pid) && number(f, "signal", sig)) {
        file.armed_pids.push_back(pid);
        file.armed_signals.push_back(sig);
      }
    } else if (keyword == "signal-done") {
      ++file.signal_dumps;
    } else if (keyword == "begin") {
      FlightDump d;
      d.comm = text(f, "comm");
      d.reason = text(f, "reason");
      d.host = text(f, "host");
      if (number(f, "generation", d.generation) && number(f, "rank", d.rank) &&
          number(f, "size", d.size) && number(f, "pid", d.pid) && number(f, "now_ns", d.now_ns) &&
          d.size > 0 && d.size <= (1 << 20)) {
        // A list that does not give every rank its number is left out, not half believed.
        const auto job_ranks = decode_rank_runs(text(f, "job_ranks"), static_cast<size_t>(d.size));
        if (job_ranks && static_cast<int>(job_ranks->size()) == d.size) d.job_ranks = *job_ranks;
        current = std::move(d);
      } else {
        current.reset();
      }
    } else if (keyword == "end") {
      if (current && text(f, "comm") == current->comm) file.dumps.push_back(std::move(*current));
      current.reset();
    }
  }
  return file;
}

std::vector<std::string> summarize_flight_dumps(const std::vector<FlightDump>& dumps,
                                                const std::set<int>& ended_lost) {
  // The newest dump of each (communicator, generation, rank).
  std::map<std::pair<std::string, uint64_t>, std::map<int, const FlightDump*>> groups;
  for (const FlightDump& d : dumps) {
    const FlightDump*& slot = groups[{d.comm, d.generation}][d.rank];
    if (!slot || d.now_ns >= slot->now_ns) slot = &d;
  }
  std::vector<std::string> out;
  for (const auto& [key, by_rank] : groups) {
    std::vector<const FlightDump*> latest;
    for (const auto& [rank, d] : by_rank) latest.push_back(d);
    summarize_communicator(latest, ended_lost, out);
  }
  return out;
}

}  // namespace tpf::detail
