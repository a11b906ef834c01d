// Which generation of a communicator's name a joining rank belongs to. The ranks that make a
// communicator take tickets from the store's counter `<name>/joined`; the n-th group of `size`
// tickets is the n-th generation, whose keys live under `<name>/<n>/`, so a name can be used
// again (the next communicator of that name is the next generation).
//
// A creation that fails may leave its generation short of members (ranks that timed out waiting
// for one that had not come): counted as they were, those who try again under the name would be
// split between that generation and the next and wait out their setup timeouts, at every try
// after. So a rank whose creation fails marks its generation abandoned, and a ticket that falls
// into an abandoned generation is given up for another: the abandoned generation's tickets run
// out among those who try again, and they meet in the next one.
#pragma once

#include <cstdint>
#include <string>

#include "tpf/store.h"

namespace tpf::detail {

// Where generation `generation` of `name` keeps its keys: "<name>/<generation>" (a PrefixStore's
// prefix).
std::string generation_prefix(const std::string& name, uint64_t generation);

// Takes this rank's ticket for a communicator `name` of `size` ranks and returns its generation,
// skipping generations marked abandoned.
uint64_t take_generation(Store& store, const std::string& name, int size);

// Marks `generation` of `name` abandoned (a creation in it failed). Best effort: a store that
// cannot be reached is left as it is (the failure that reached it is what the caller reports).
void abandon_generation(Store& store, const std::string& name, uint64_t generation) noexcept;

}  // namespace tpf::detail
