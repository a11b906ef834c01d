// What the model subcommands (train, generate, export, import) share: a small `--flag value`
// parser, the world communicator (from `tpf run`'s environment, or a one-rank group when started
// alone), and the BLAS thread count per rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpf/comm.h"
#include "tpf/store.h"

namespace tpf::cli {

// Parses "--name value", "--name=value" and bare "--switch" flags. `flags` lists every accepted
// flag; those in `switches` take no value. Anything else is a UsageError.
class FlagParser {
 public:
  FlagParser(int argc, char** argv, const std::vector<std::string>& flags,
             const std::vector<std::string>& switches = {});
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  std::string required(const std::string& flag) const;
  // Strict: the whole value, an integer in [min_value, max_value] (model/parse_number.h).
  int64_t get_int(const std::string& flag, int64_t fallback, int64_t min_value,
                  int64_t max_value = INT64_MAX) const;
  double get_double(const std::string& flag, double fallback, double min_value) const;
  bool help() const { return help_; }

 private:
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// The ranks of this job: from the launcher's environment if there is one, else a group of one
// (a store served in-process), so `tpf train ...` runs without `tpf run`.
class World {
 public:
  World();
  Communicator& comm() { return comm_; }
  // Ranks of this job on this machine (they share its cores).
  int local_ranks() const { return local_ranks_; }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  int local_ranks_ = 1;
  Communicator comm_;
};

// OpenBLAS threads per rank: --threads if given, else this machine's cores divided among the
// ranks that share it (the launcher's local world size), capped by the CPUs the rank is allowed
// to run on, at least 1.
int configure_blas_threads(const FlagParser& flags, int local_ranks);

}  // namespace tpf::cli
