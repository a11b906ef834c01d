#include "cli/bench_spec.h"

#include <array>
#include <cctype>
#include <limits>
#include <utility>

namespace tpf::cli {

const char* async_wait_name(AsyncWait wait) {
  switch (wait) {
    case AsyncWait::wait: return "wait";
    case AsyncWait::timed: return "timed";
    case AsyncWait::poll: return "poll";
  }
  return "?";
}

std::optional<CallShape> call_shape(Collective c, size_t bytes, size_t elem_size, int nranks) {
  if (elem_size == 0 || nranks <= 0) return std::nullopt;
  const size_t n = static_cast<size_t>(nranks);
  const size_t total = bytes / elem_size;
  CallShape s;
  switch (c) {
    case Collective::all_reduce:
    case Collective::broadcast:
    case Collective::reduce:
    case Collective::send_recv:
      if (total == 0) return std::nullopt;
      s.count = s.send_elems = s.recv_elems = s.elems = total;
      break;
    case Collective::all_gather:
    case Collective::gather:
      // Each rank contributes one block; the (root's) output holds all n blocks.
      s.count = total / n;
      if (s.count == 0) return std::nullopt;
      s.send_elems = s.count;
      s.recv_elems = s.elems = s.count * n;
      break;
    case Collective::reduce_scatter:
    case Collective::scatter:
      s.count = total / n;
      if (s.count == 0) return std::nullopt;
      s.send_elems = s.elems = s.count * n;
      s.recv_elems = s.count;
      break;
    case Collective::all_to_all:
      s.count = total / n;
      if (s.count == 0) return std::nullopt;
      s.send_elems = s.recv_elems = s.elems = s.count * n;
      break;
    case Collective::barrier: break;  // no data: a single row of zero bytes
  }
  s.bytes = s.elems * elem_size;
  return s;
}

std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t factor) {
  std::vector<size_t> sizes;
  size_t s = min_bytes;
  sizes.push_back(s);
  if (factor < 2 || s == 0) return sizes;  // 0 x factor never grows
  while (s <= max_bytes / factor && s * factor <= max_bytes) {
    s *= factor;
    sizes.push_back(s);
  }
  return sizes;
}

std::optional<size_t> parse_byte_size(std::string_view text) noexcept {
  size_t i = 0;
  size_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    const size_t digit = static_cast<size_t>(text[i] - '0');
    if (value > (std::numeric_limits<size_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string_view suffix = text.substr(i);
  size_t shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        suffix.remove_prefix(1);
        break;
      case 'M':
        shift = 20;
        suffix.remove_prefix(1);
        break;
      case 'G':
        shift = 30;
        suffix.remove_prefix(1);
        break;
      default: break;
    }
  }
  if (suffix == "iB" || suffix == "ib" || (shift != 0 && suffix == "i")) suffix = {};
  if (suffix == "B" || suffix == "b") suffix = {};
  if (!suffix.empty()) return std::nullopt;
  if (shift != 0 && value > (std::numeric_limits<size_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

}  // namespace tpf::cli
