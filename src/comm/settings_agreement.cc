#include "comm/settings_agreement.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "tpf/error.h"
#include "transport/rank_names.h"

namespace tpf::detail {
namespace {

constexpr char kSeparator = ';';

// A value as it travels: the separators and control characters made '?'.
std::string clean(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < ' ' || c == kSeparator || c == '=') c = '?';
  }
  return text;
}

struct Parsed {
  std::vector<std::string> order;  // names in the order the rank listed them
  std::map<std::string, std::pair<char, std::string>> by_name;  // name -> (scope, value)
};

Parsed parse(const std::string& line) {
  Parsed parsed;
  std::istringstream fields(line);
  for (std::string field; std::getline(fields, field, kSeparator);) {
    const size_t equals = field.find('=');
    if (field.size() < 2 || field[1] != ':' || equals == std::string::npos) continue;
    std::string name = field.substr(2, equals - 2);
    if (parsed.by_name.count(name) == 0) parsed.order.push_back(name);
    parsed.by_name[name] = {field[0], field.substr(equals + 1)};
  }
  return parsed;
}

// The value of `name` on each of `ranks`, grouped: "'a' on ranks 0, 2; 'b' on rank 1", or empty
// where they all agree. A rank that does not list the setting (another tpfabric) has none.
std::string differences(const std::vector<Parsed>& parsed, const std::vector<int>& ranks,
                        const std::string& name) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // in order of first appearance
  for (int r : ranks) {
    const auto found = parsed[r].by_name.find(name);
    const std::string value =
        found == parsed[r].by_name.end() ? "(none)" : "'" + found->second.second + "'";
    auto group = groups.begin();
    while (group != groups.end() && group->first != value) ++group;
    if (group == groups.end()) {
      groups.push_back({value, {r}});
    } else {
      group->second.push_back(r);
    }
  }
  if (groups.size() < 2) return "";
  std::string text;
  for (const auto& [value, holders] : groups) {
    text += (text.empty() ? "" : "; ") + value +
            (holders.size() == 1 ? " on rank " : " on ranks ") + transport::join_ranks(holders);
  }
  return text;
}

}  // namespace

std::string encode_shared_settings(const std::vector<SharedSetting>& settings) {
  std::string line;
  for (const SharedSetting& s : settings) {
    if (!line.empty()) line += kSeparator;
    line += s.among == SharedAmong::communicator ? "c:" : "h:";
    line += clean(s.name) + "=" + clean(s.value);
  }
  return line;
}

void check_shared_settings(const std::vector<std::string>& encoded_by_rank,
                           const topo::HostMap& hosts, const std::string& label) {
  std::vector<Parsed> parsed;
  for (const std::string& line : encoded_by_rank) parsed.push_back(parse(line));
  std::vector<std::string> names;  // every rank's, in the order of the first that lists each
  for (const Parsed& p : parsed) {
    for (const std::string& name : p.order) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::vector<int> everyone(parsed.size());
  for (size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
  for (const std::string& name : names) {
    bool among_hosts = false;  // a shared-memory setting: compared inside each host
    for (const Parsed& p : parsed) {
      const auto found = p.by_name.find(name);
      if (found != p.by_name.end()) among_hosts = found->second.first == 'h';
    }
    if (!among_hosts) {
      const std::string diff = differences(parsed, everyone, name);
      if (diff.empty()) continue;
      throw Error(ErrorCode::mismatch,
                  label + ": its ranks differ on " + name + " (" + diff +
                      "): every rank makes the same choices from it on its own (network "
                      "algorithms, segment sizes), so set it alike on every rank");
    }
    for (int h = 0; h < hosts.hosts(); ++h) {
      const std::string diff = differences(parsed, hosts.ranks_on(h), name);
      if (diff.empty()) continue;
      throw Error(ErrorCode::mismatch,
                  label + ": the ranks on host '" + hosts.key(h) + "' differ on " + name + " (" +
                      diff +
                      "): a host's ranks make the same choices from it on their own (shared-memory "
                      "algorithms), so set it alike on every rank of a host");
    }
  }
}

}  // namespace tpf::detail
