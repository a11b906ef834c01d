// Flight-recorder dumps through the job's rendezvous store, for ranks that run on another host
// than their launcher: `tpf run --hosts` sets TPF_FLIGHT_RECORDER_STORE=1 for them (its dump
// directory is on its own machine), each dump is appended to the rank's texts in the store, and
// the launcher copies them into its directory beside local ranks' files (apps/cli/flight_dumps.h),
// so that its one summary covers every host. This file owns the keys both sides use.
#pragma once

#include <cstdint>
#include <string>

namespace tpf::detail {

// The number of texts rank `rank` stored, and its n-th (from 1). After each text, its writer
// counts it in a job-wide count and names its rank in the notice of that number, so a reader
// learns with one request whether anything is new, and which ranks to read, without asking every
// rank (a notice not there yet is one whose text is: its writer stored the text first).
std::string flight_store_count_key(int rank);
std::string flight_store_text_key(int rank, int64_t n);
inline constexpr const char* kFlightStoreTotalKey = "tpf-flight/texts";
std::string flight_store_notice_key(int64_t m);

// TPF_FLIGHT_RECORDER_STORE=1: this process's dumps go to the store (TPF_STORE_ADDR,
// TPF_JOB_SECRET, TPF_RANK) instead of TPF_FLIGHT_RECORDER_DIR or stderr.
bool flight_dumps_go_to_store();

// Appends `text` to this rank's texts in the store over a connection of its own (the
// communicator's may be the one that failed), connecting for at most a few seconds. False, with
// the reason in `why`, if it could not.
bool append_flight_text_to_store(const std::string& text, std::string& why) noexcept;

}  // namespace tpf::detail
