#include "coll/collective_kinds.h"

#include <array>
#include <string>

namespace tpf::coll {
namespace {

constexpr std::array<CollectiveInfo, 10> kCollectives = {{
    // id, name, reduces, rooted, has_in_place, bus factor
    {Collective::all_reduce, "all_reduce", true, false, true, BusFactor::twice_share},
    {Collective::all_gather, "all_gather", false, false, true, BusFactor::share},
    {Collective::reduce_scatter, "reduce_scatter", true, false, true, BusFactor::share},
    {Collective::broadcast, "broadcast", false, true, true, BusFactor::one},
    {Collective::reduce, "reduce", true, true, true, BusFactor::one},
    {Collective::all_to_all, "all_to_all", false, false, false, BusFactor::share},
    {Collective::gather, "gather", false, true, false, BusFactor::share},
    {Collective::scatter, "scatter", false, true, false, BusFactor::share},
    {Collective::send_recv, "send_recv", false, false, false, BusFactor::one},
    {Collective::barrier, "barrier", false, false, false, BusFactor::none},
}};

// `spelling` equals `name` with its underscores optional.
bool same_without_underscores(std::string_view name, std::string_view spelling) noexcept {
  size_t a = 0;
  size_t b = 0;
  while (a < name.size() && b < spelling.size()) {
    if (name[a] == '_' && spelling[b] != '_') {
      ++a;
      continue;
    }
    if (name[a] != spelling[b]) return false;
    ++a;
    ++b;
  }
  return a == name.size() && b == spelling.size();
}

}  // namespace

std::span<const CollectiveInfo> all_collectives() noexcept { return kCollectives; }

// Rows in enumerator order: collective_info() indexes, as the fabric asks on every call.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kCollectives.size(); ++i) {
    if (static_cast<size_t>(kCollectives[i].id) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order());

const CollectiveInfo& collective_info(Collective c) noexcept {
  const auto index = static_cast<size_t>(c);
  return kCollectives[index < kCollectives.size() ? index : 0];
}

const char* collective_name(Collective c) noexcept { return collective_info(c).name; }

std::optional<Collective> parse_collective(std::string_view spelling) noexcept {
  for (const CollectiveInfo& info : kCollectives) {
    if (same_without_underscores(info.name, spelling)) return info.id;
  }
  return std::nullopt;
}

std::string collective_choices() {
  std::string choices;
  for (const CollectiveInfo& info : kCollectives) {
    if (!choices.empty()) choices += '|';
    choices += info.name;
  }
  return choices;
}

bool collective_reduces(Collective c) noexcept { return collective_info(c).reduces; }
bool collective_has_root(Collective c) noexcept { return collective_info(c).rooted; }
bool collective_has_in_place(Collective c) noexcept { return collective_info(c).has_in_place; }

double bus_bandwidth_factor(Collective c, int nranks) noexcept {
  if (nranks <= 0) return 0.0;
  const double n = nranks;
  switch (collective_info(c).bus) {
    case BusFactor::twice_share: return 2.0 * (n - 1.0) / n;
    case BusFactor::share: return (n - 1.0) / n;
    case BusFactor::one: return 1.0;
    case BusFactor::none: break;
  }
  return 0.0;
}

}  // namespace tpf::coll
