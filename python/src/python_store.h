// A tpf::Store over a Python object with torch.distributed.Store's methods: set(key, value),
// get(key) -> bytes, add(key, delta) -> int and wait([key], timedelta); check([key]) -> bool if it
// has one (torch 1.13's stores do not).
// torch's TCPStore, FileStore, HashStore and PrefixStore all qualify, which is how the PyTorch
// backend bootstraps through the store torch hands it (no second store, no second port).
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <string>

#include "tpf/store.h"

namespace tpf::python {

class PythonStore : public Store {
 public:
  // Raises tpf::Error(invalid_argument) naming the first method `store` lacks.
  explicit PythonStore(pybind11::object store);
  ~PythonStore() override;

  // Each call takes the GIL: the communicator calls its store from threads that do not hold it.
  // A Python exception becomes tpf::Error(bootstrap), or Error(timeout) from a bounded get.
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;

 private:
  bool contains(const std::string& key);  // GIL held; raises what the store raises

  pybind11::object store_;
  bool has_check_;
};

}  // namespace tpf::python
