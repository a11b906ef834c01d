#include "comm/name_generations.h"

namespace tpf::detail {
namespace {

std::string abandoned_key(const std::string& name, uint64_t generation) {
  return generation_prefix(name, generation) + "/abandoned";
}

}  // namespace

std::string generation_prefix(const std::string& name, uint64_t generation) {
  return name + "/" + std::to_string(generation);
}

uint64_t take_generation(Store& store, const std::string& name, int size) {
  for (;;) {
    const int64_t ticket = store.add(name + "/joined", 1);
    const uint64_t generation = static_cast<uint64_t>((ticket - 1) / size);
    if (!store.check(abandoned_key(name, generation))) return generation;
  }
}

void abandon_generation(Store& store, const std::string& name, uint64_t generation) noexcept {
  try {
    store.set(abandoned_key(name, generation), "1");
  } catch (...) {
    // Best effort: the failure that ends this creation is what the caller reports.
  }
}

}  // namespace tpf::detail
