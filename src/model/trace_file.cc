#include "model/trace_file.h"

#include <cstdint>
#include <fstream>
#include <vector>

#include "formats/json.h"
#include "tpf/error.h"

namespace tpf {

namespace {

// This rank's events, comma-separated (without the enclosing brackets).
std::string events_of(const Timeline& timeline, int pid, const std::string& process_name) {
  auto event = [&](json::Value v) { return json::dump(v); };
  json::Value name;
  name.set("name", "process_name");
  name.set("ph", "M");
  name.set("pid", static_cast<int64_t>(pid));
  json::Value args;
  args.set("name", process_name);
  name.set("args", std::move(args));
  json::Value order;
  order.set("name", "process_sort_index");
  order.set("ph", "M");
  order.set("pid", static_cast<int64_t>(pid));
  json::Value index;
  index.set("sort_index", static_cast<int64_t>(pid));
  order.set("args", std::move(index));
  std::string out = event(std::move(name)) + ",\n" + event(std::move(order));
  for (const Timeline::Span& s : timeline.spans()) {
    json::Value v;
    v.set("name", s.name);
    v.set("cat", std::string(s.category));
    v.set("ph", "X");
    v.set("ts", s.start_us);
    v.set("dur", s.duration_us);
    v.set("pid", static_cast<int64_t>(pid));
    v.set("tid", int64_t{0});
    out += ",\n" + event(std::move(v));
  }
  return out;
}

}  // namespace

void write_chrome_trace(Communicator& world, const Timeline& timeline,
                        const std::string& process_name, const std::string& path) {
  const std::string mine = events_of(timeline, world.rank(), process_name);
  if (world.rank() != 0) {
    const auto length = static_cast<int64_t>(mine.size());
    world.send(&length, 1, DType::i64, 0);
    world.send(mine.data(), mine.size(), DType::u8, 0);
    return;
  }
  // Everything is received before the file is opened: a path that cannot be written fails rank 0
  // alone, after the other ranks have finished.
  std::vector<std::string> theirs(static_cast<size_t>(world.size()));
  for (int r = 1; r < world.size(); ++r) {
    int64_t length = 0;
    world.recv(&length, 1, DType::i64, r);
    theirs[static_cast<size_t>(r)].resize(static_cast<size_t>(length));
    world.recv(theirs[static_cast<size_t>(r)].data(), static_cast<size_t>(length), DType::u8, r);
  }
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw Error(ErrorCode::system, "--trace: cannot write " + path);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" << mine;
  for (int r = 1; r < world.size(); ++r) out << ",\n" << theirs[static_cast<size_t>(r)];
  out << "\n]}\n";
  if (!out.flush()) throw Error(ErrorCode::system, "--trace: cannot write " + path);
}

}  // namespace tpf
