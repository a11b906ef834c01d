#include "peer_common.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tpf::peers {
namespace {

[[noreturn]] void usage_error(const char* program, const std::string& message) {
  std::fprintf(stderr,
               "%s: %s\n"
               "usage: %s [-c COLLECTIVE,...] [-b MIN] [-e MAX]\n"
               "          [-f FACTOR] [-n ITERS] [-w WARMUP] [-np NPROCS]\n",
               program, message.c_str(), program);
  std::exit(2);
}

int to_int(const char* program, std::string_view flag, std::string_view v, int min_value) {
  int out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < min_value) {
    usage_error(program, std::string(flag) + " expects an integer >= " + std::to_string(min_value) +
                             ", got '" + std::string(v) + "'");
  }
  return out;
}

size_t to_bytes(const char* program, std::string_view flag, std::string_view v) {
  const auto b = cli::parse_byte_size(v);
  if (!b)
    usage_error(program, std::string(flag) + " expects a size like 8, 64K, 1M, got '" +
                             std::string(v) + "'");
  return *b;
}

}  // namespace

bool peer_supports(Collective c) noexcept {
  return c == Collective::all_reduce || c == Collective::all_gather ||
         c == Collective::reduce_scatter || c == Collective::broadcast;
}

bool mpi_supports(Collective c) noexcept {
  return peer_supports(c) || c == Collective::reduce || c == Collective::gather ||
         c == Collective::scatter || c == Collective::all_to_all;
}

PeerArgs parse_peer_args(int argc, char** argv, const char* program,
                         bool (*supports)(Collective) noexcept) {
  std::vector<Collective> supported;  // in the vocabulary's order
  std::string choices;
  for (const coll::CollectiveInfo& info : coll::all_collectives()) {
    if (!supports(info.id)) continue;
    supported.push_back(info.id);
    if (!choices.empty()) choices += ',';
    choices += info.name;
  }
  PeerArgs a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") usage_error(program, "measures collectives");
    if (i + 1 >= argc) usage_error(program, "flag '" + std::string(flag) + "' needs a value");
    const std::string_view v = argv[++i];
    if (flag == "-c") {
      std::string_view rest = v;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view name = rest.substr(0, comma);
        const auto c = cli::parse_collective(name);
        if (!c || !supports(*c)) {
          usage_error(program,
                      "unsupported collective '" + std::string(name) + "'; choose from " + choices);
        }
        a.collectives.push_back(*c);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
    } else if (flag == "-b") {
      a.min_bytes = to_bytes(program, flag, v);
    } else if (flag == "-e") {
      a.max_bytes = to_bytes(program, flag, v);
    } else if (flag == "-f") {
      a.factor = static_cast<size_t>(to_int(program, flag, v, 2));
    } else if (flag == "-n") {
      a.iters = to_int(program, flag, v, 1);
    } else if (flag == "-w") {
      a.warmup = to_int(program, flag, v, 0);
    } else if (flag == "-np") {
      a.nprocs = to_int(program, flag, v, 1);
    } else {
      usage_error(program, "unknown flag '" + std::string(flag) + "'");
    }
  }
  if (a.collectives.empty()) a.collectives = supported;
  if (a.min_bytes > a.max_bytes) usage_error(program, "-b is larger than -e");
  return a;
}

float peer_fill(int rank, size_t index) noexcept {
  // Small integers: sums over any rank count are exact in f32, so any difference is an error.
  return static_cast<float>((static_cast<size_t>(rank) * 7 + index * 3) % 5) - 2.0f;
}

size_t peer_count_wrong(Collective c, int rank, int nranks, size_t count, const float* out,
                        size_t out_elems) {
  size_t wrong = 0;
  for (size_t i = 0; i < out_elems; ++i) {
    float want = 0.0f;
    switch (c) {
      case Collective::all_reduce:
      case Collective::reduce_scatter: {
        const size_t j = c == Collective::all_reduce ? i : static_cast<size_t>(rank) * count + i;
        for (int r = 0; r < nranks; ++r) want += peer_fill(r, j);
        break;
      }
      case Collective::reduce:
        for (int r = 0; r < nranks; ++r) want += peer_fill(r, i);
        break;
      case Collective::all_gather:
      case Collective::gather: want = peer_fill(static_cast<int>(i / count), i % count); break;
      case Collective::broadcast: want = peer_fill(0, i); break;
      case Collective::scatter: want = peer_fill(0, static_cast<size_t>(rank) * count + i); break;
      case Collective::all_to_all:  // block r: rank r's block for this rank
        want =
            peer_fill(static_cast<int>(i / count), static_cast<size_t>(rank) * count + i % count);
        break;
      default: break;
    }
    wrong += out[i] != want;
  }
  return wrong;
}

std::string peer_json_line(const char* impl, Collective c, int nranks, const CallShape& shape,
                           double time_us, size_t wrong) {
  const double algbw = time_us > 0.0 ? static_cast<double>(shape.bytes) / time_us / 1e3 : 0.0;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"impl\":\"%s\",\"collective\":\"%s\",\"nranks\":%d,\"dtype\":\"f32\","
                "\"bytes\":%zu,\"count\":%zu,\"time_us\":%.6g,\"algbw\":%.6g,\"busbw\":%.6g,"
                "\"wrong\":%zu}",
                impl, cli::collective_name(c), nranks, shape.bytes, shape.elems, time_us, algbw,
                algbw * coll::bus_bandwidth_factor(c, nranks), wrong);
  return buf;
}

}  // namespace tpf::peers
