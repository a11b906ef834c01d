// Reading what `tpf bench --json` writes (apps/cli/bench_table.cc), for the calibrations of the
// link classes (plan/calibration.h, plan/network_calibration.h). Every error is a
// tpf::Error(invalid_argument) naming the file (`path`), where in it ("rows[3].oop") and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/json.h"

namespace tpf::plan {

// The top-level object of a bench file.
json::Value parse_bench_object(const std::string& text, const std::string& path);

// `key` of `object` (at JSON path `where`, empty for the top level), or an error naming the file,
// the place and `hint`.
const json::Value& member(const json::Value& object, const std::string& key,
                          const std::string& where, const std::string& path,
                          const std::string& hint = "");
std::string get_string(const json::Value& object, const std::string& key, const std::string& where,
                       const std::string& path, const std::string& hint = "");
int64_t get_int(const json::Value& object, const std::string& key, const std::string& where,
                const std::string& path, const std::string& hint = "");
double get_double(const json::Value& object, const std::string& key, const std::string& where,
                  const std::string& path, const std::string& hint = "");
bool get_bool(const json::Value& object, const std::string& key, const std::string& where,
              const std::string& path, const std::string& hint = "");

// The "rows" array, not empty.
const json::Array& rows_of(const json::Value& root, const std::string& path);
// One placement (out-of-place or in-place) of a row: its time in us, checked for sense (positive,
// finite, no wrong elements).
double row_time_us(const json::Value& measurement, const std::string& where,
                   const std::string& path);

// The placements a row measured, each checked by row_time_us: out of place ("oop"), then in place
// ("ip"). Either may be null (`tpf bench --placement` left it out; no in-place form), not both.
struct PlacementTime {
  bool in_place = false;
  double us = 0.0;
  std::string where;  // "rows[3].oop"
};
std::vector<PlacementTime> row_times_us(const json::Value& row, const std::string& where,
                                        const std::string& path);

}  // namespace tpf::plan
