#include "plan/bench_json.h"

#include <cmath>

#include "tpf/error.h"

namespace tpf::plan {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

// `where` is the JSON path of an object ("rows[3]", "rows[3].oop"), empty for the top level.
std::string qualified(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

// Runs `read` (a json accessor) and turns its type error into one naming the file and the key.
template <class Read>
auto typed(const std::string& path, const std::string& key, Read&& read) {
  try {
    return read();
  } catch (const Error& e) {
    fail(path + ": '" + key + "': " + e.what());
  }
}

}  // namespace

json::Value parse_bench_object(const std::string& text, const std::string& path) {
  json::Value root = json::parse(text, path);
  if (!root.is_object()) {
    fail(path + ": the top level is " + std::string(json::type_name(root.type())) +
         ", expected the object `tpf bench --json` writes");
  }
  return root;
}

const json::Value& member(const json::Value& object, const std::string& key,
                          const std::string& where, const std::string& path,
                          const std::string& hint) {
  const json::Value* v = object.find(key);
  if (v == nullptr) {
    fail(path + ": " + (where.empty() ? std::string("the top-level object") : where) +
         " has no key '" + key + "'" + (hint.empty() ? "" : "; " + hint));
  }
  return *v;
}

std::string get_string(const json::Value& object, const std::string& key, const std::string& where,
                       const std::string& path, const std::string& hint) {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_string(); });
}

int64_t get_int(const json::Value& object, const std::string& key, const std::string& where,
                const std::string& path, const std::string& hint) {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_int(); });
}

double get_double(const json::Value& object, const std::string& key, const std::string& where,
                  const std::string& path, const std::string& hint) {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_double(); });
}

bool get_bool(const json::Value& object, const std::string& key, const std::string& where,
              const std::string& path, const std::string& hint) {
  const json::Value& v = member(object, key, where, path, hint);
  return typed(path, qualified(where, key), [&] { return v.as_bool(); });
}

const json::Array& rows_of(const json::Value& root, const std::string& path) {
  const json::Value& rows = member(root, "rows", "", path);
  if (!rows.is_array()) {
    fail(path + ": 'rows' is " + json::type_name(rows.type()) + ", expected an array of sizes");
  }
  const json::Array& array = rows.as_array();
  if (array.empty()) fail(path + ": 'rows' is empty: the benchmark measured nothing");
  return array;
}

double row_time_us(const json::Value& measurement, const std::string& where,
                   const std::string& path) {
  if (!measurement.is_object()) {
    fail(path + ": " + where + " is " + json::type_name(measurement.type()) +
         ", expected an object with time_us");
  }
  const json::Value& wrong = member(measurement, "wrong", where, path);
  if (!wrong.is_null()) {
    const int64_t w = typed(path, qualified(where, "wrong"), [&] { return wrong.as_int(); });
    if (w != 0) {
      fail(path + ": " + where + " has " + std::to_string(w) +
           " wrong elements; a run with wrong results is no measurement of the algorithm");
    }
  }
  const json::Value& time = member(measurement, "time_us", where, path);
  const double us = typed(path, qualified(where, "time_us"), [&] { return time.as_double(); });
  if (!(us > 0) || !std::isfinite(us)) {
    fail(path + ": " + where + ".time_us is " + std::to_string(us) + ", expected a positive time");
  }
  return us;
}

std::vector<PlacementTime> row_times_us(const json::Value& row, const std::string& where,
                                        const std::string& path) {
  std::vector<PlacementTime> times;
  // "oop" is in every file tpf bench has written; "ip" was left out by early ones.
  const auto add = [&](bool in_place, const json::Value& measurement, const std::string& at) {
    times.push_back({in_place, row_time_us(measurement, at, path), at});
  };
  const json::Value& oop = member(row, "oop", where, path);
  if (!oop.is_null()) add(false, oop, where + ".oop");
  const json::Value* ip = row.find("ip");
  if (ip != nullptr && !ip->is_null()) add(true, *ip, where + ".ip");
  if (times.empty()) {
    fail(path + ": " + where + " has neither an out-of-place (oop) nor an in-place (ip) time");
  }
  return times;
}

}  // namespace tpf::plan
