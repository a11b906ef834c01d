// Reading YAML mappings with the planner's rules: every key must be known, every value the right
// type, and every error names the file and the key path ("dgx.yaml: network.switch_radix: ...").
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <string>

namespace tpf::plan {

class YamlFields {
 public:
  // `node` must be a mapping whose keys are all in `allowed`; `path` prefixes messages.
  YamlFields(const YAML::Node& node, std::string origin, std::string path,
             std::initializer_list<const char*> allowed);

  bool has(const char* key) const;
  // Each reads `key` into `out` if present (leaving `out` alone otherwise).
  void read(const char* key, int& out) const;
  void read(const char* key, double& out) const;
  void read(const char* key, bool& out) const;
  void read(const char* key, std::string& out) const;
  void read(const char* key, uint64_t& out) const;
  // A nested mapping, with its own allowed keys.
  YamlFields child(const char* key, std::initializer_list<const char*> allowed) const;
  const YAML::Node& node() const { return node_; }
  // "file: a.b.key" for messages.
  std::string where(const char* key) const;
  [[noreturn]] void fail(const char* key, const std::string& message) const;

 private:
  YAML::Node node_;
  std::string origin_;
  std::string path_;
};

// Parses `text` to a YAML mapping; throws Error(invalid_argument) with the line and column of a
// syntax error.
YAML::Node parse_yaml_document(const std::string& text, const std::string& origin);

}  // namespace tpf::plan
