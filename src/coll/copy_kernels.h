// Copies of the staged data-movement collectives. Large outputs are memory-bound, so two things
// matter there: reading the source once when it goes to two places (the rank's slot and its own
// block of the output), and writing output lines with non-temporal stores, which skip the read a
// normal store makes of every line it overwrites and leave the slots the peers read in cache.
#pragma once

#include <cstddef>

namespace tpf::coll {

// Outputs at least this large are written with non-temporal stores: about the last-level cache
// of a server core complex (32 MiB on the development EPYC), above which the output is not read
// back from cache anyway. Measured on the 2-core VM in docs/fabric.md.
inline constexpr size_t kStreamingOutputBytes = size_t{32} << 20;

// Copies `bytes` from src to `slot` and, unless `out` is null or equal to src, to `out`, reading
// src once. With `stream`, out is written with non-temporal stores (slot never is: peers read it).
void copy_to_slot_and_output(std::byte* slot, std::byte* out, const std::byte* src, size_t bytes,
                             bool stream) noexcept;

// memcpy into an output buffer, with non-temporal stores when `stream`.
void copy_to_output(std::byte* out, const std::byte* src, size_t bytes, bool stream) noexcept;

// Orders the non-temporal stores before anything that follows (call before returning the output).
void stream_fence() noexcept;

}  // namespace tpf::coll
