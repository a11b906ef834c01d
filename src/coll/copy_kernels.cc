#include "coll/copy_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tpf::coll {
namespace {

// Bytes before `p` reaches a 16-byte boundary (non-temporal stores need aligned addresses).
size_t misalignment(const std::byte* p) { return (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16; }

}  // namespace

void copy_to_slot_and_output(std::byte* slot, std::byte* out, const std::byte* src, size_t bytes,
                             bool stream) noexcept {
  if (out == nullptr || out == src) {
    std::memcpy(slot, src, bytes);
    return;
  }
#if defined(__x86_64__)
  // Slots are cache-line aligned; align the output, then move 64 bytes per iteration.
  const size_t head = std::min(bytes, misalignment(out));
  std::memcpy(slot, src, head);
  std::memcpy(out, src, head);
  size_t done = head;
  const bool aligned_slot = reinterpret_cast<uintptr_t>(slot + head) % 16 == 0;
  if (aligned_slot) {
    for (; done + 64 <= bytes; done += 64) {
      __m128i v[4];
      for (int i = 0; i < 4; ++i)
        v[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + done + 16 * i));
      for (int i = 0; i < 4; ++i)
        _mm_store_si128(reinterpret_cast<__m128i*>(slot + done + 16 * i), v[i]);
      if (stream) {
        for (int i = 0; i < 4; ++i)
          _mm_stream_si128(reinterpret_cast<__m128i*>(out + done + 16 * i), v[i]);
      } else {
        for (int i = 0; i < 4; ++i)
          _mm_store_si128(reinterpret_cast<__m128i*>(out + done + 16 * i), v[i]);
      }
    }
  }
  std::memcpy(slot + done, src + done, bytes - done);
  std::memcpy(out + done, src + done, bytes - done);
#else
  (void)stream;
  std::memcpy(slot, src, bytes);
  std::memcpy(out, src, bytes);
#endif
}

void copy_to_output(std::byte* out, const std::byte* src, size_t bytes, bool stream) noexcept {
#if defined(__x86_64__)
  if (stream) {
    const size_t head = std::min(bytes, misalignment(out));
    std::memcpy(out, src, head);
    size_t done = head;
    for (; done + 64 <= bytes; done += 64) {
      for (int i = 0; i < 4; ++i) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(out + done + 16 * i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + done + 16 * i)));
      }
    }
    std::memcpy(out + done, src + done, bytes - done);
    return;
  }
#endif
  (void)stream;
  std::memmove(out, src, bytes);  // tolerates the overlap of a (misused) in-place call
}

void stream_fence() noexcept {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace tpf::coll
