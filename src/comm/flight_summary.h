// Reading flight recorder dumps (comm/flight_recorder.h) back, and the one summary `tpf run`
// prints from the dumps of all ranks: per communicator, where each rank is (its last started and
// last completed operation, and their state) and which rank(s) everyone waits for.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comm/flight_recorder.h"

namespace tpf::detail {

// One complete dump of one communicator's recorder.
struct FlightDump {
  std::string comm;
  uint64_t generation = 0;
  int rank = 0;
  int size = 0;
  int64_t pid = 0;
  std::string host;    // the machine's name ("" in dumps written before it was recorded)
  std::string reason;  // "timeout", "mismatch", "peer_died", "aborted", "signal"
  std::vector<int> job_ranks;  // the job's number of each rank of a split (empty: the same)
  int64_t now_ns = 0;  // steady_clock when it was written
  std::vector<FlightRecord> records;  // oldest first
};

// What one process wrote to its dump file.
struct FlightFile {
  std::vector<int64_t> armed_pids;  // processes that answer the dump signal
  std::vector<int> armed_signals;   // and with which signal (same order)
  size_t signal_dumps = 0;          // dumps made on the signal, finished
  std::vector<FlightDump> dumps;    // complete dumps, in file order (a cut-off one is left out)
};

// Tolerant: malformed lines are skipped, a dump without its end line is left out.
FlightFile parse_flight_file(std::string_view content);

// The summary, one line per entry, without trailing newlines. Per communicator (name and
// generation), the latest dump of each rank (with its host's name where they name several
// hosts: a pid alone does not say where to look; a split's ranks with their job ranks, as its
// errors name them): its last started and last completed collective,
// point-to-point operations in flight, then who waits for whom: the rank(s) at the lowest
// collective sequence that have not started it, or the ranks that left no dump; point-to-point
// operations whose peer has not posted the matching call. Empty when there are no dumps.
// `ended_lost`: the job ranks the launcher found lost and ended, which left no dump for that
// reason and which nobody waits for any more (said as such, not as ranks the others may wait for).
std::vector<std::string> summarize_flight_dumps(const std::vector<FlightDump>& dumps,
                                                const std::set<int>& ended_lost = {});

}  // namespace tpf::detail
