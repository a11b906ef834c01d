#include "plan/yaml_fields.h"

#include <cmath>

#include "plan/invalid_input.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {}  // namespace

YAML::Node parse_yaml_document(const std::string& text, const std::string& origin) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) invalid(origin + ": expected a YAML mapping at the top level");
    return root;
  } catch (const YAML::Exception& e) {
    invalid(origin + ": YAML syntax error at line " + std::to_string(e.mark.line + 1) +
            ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

YamlFields::YamlFields(const YAML::Node& node, std::string origin, std::string path,
                       std::initializer_list<const char*> allowed)
    : node_(node), origin_(std::move(origin)), path_(std::move(path)) {
  if (!node_.IsMap()) {
    invalid(origin_ + ": " + (path_.empty() ? std::string("document") : path_) +
            ": expected a mapping of keys to values");
  }
  for (const auto& entry : node_) {
    const std::string key = entry.first.as<std::string>();
    bool known = false;
    std::string accepted;
    for (const char* name : allowed) {
      known = known || key == name;
      accepted += accepted.empty() ? name : std::string(", ") + name;
    }
    if (!known) invalid(where(key.c_str()) + ": unknown key (accepted: " + accepted + ")");
  }
}

std::string YamlFields::where(const char* key) const {
  return origin_ + ": " + (path_.empty() ? std::string() : path_ + ".") + key;
}

void YamlFields::fail(const char* key, const std::string& message) const {
  invalid(where(key) + ": " + message);
}

bool YamlFields::has(const char* key) const { return static_cast<bool>(node_[key]); }

void YamlFields::read(const char* key, int& out) const {
  if (!has(key)) return;
  double value = 0;
  read(key, value);
  if (value != std::floor(value) || std::abs(value) > 2e9) fail(key, "expected a whole number");
  out = static_cast<int>(value);
}

void YamlFields::read(const char* key, uint64_t& out) const {
  if (!has(key)) return;
  try {
    out = node_[key].as<uint64_t>();
  } catch (const YAML::Exception&) {
    fail(key, "expected a non-negative whole number, got '" + node_[key].Scalar() + "'");
  }
}

void YamlFields::read(const char* key, double& out) const {
  if (!has(key)) return;
  const YAML::Node value = node_[key];
  try {
    if (!value.IsScalar()) throw YAML::Exception(value.Mark(), "not a scalar");
    out = value.as<double>();
  } catch (const YAML::Exception&) {
    fail(key,
         "expected a number, got '" + (value.IsScalar() ? value.Scalar() : "a collection") + "'");
  }
  if (!std::isfinite(out)) fail(key, "expected a finite number");
}

void YamlFields::read(const char* key, bool& out) const {
  if (!has(key)) return;
  try {
    out = node_[key].as<bool>();
  } catch (const YAML::Exception&) {
    fail(key, "expected true or false, got '" + node_[key].Scalar() + "'");
  }
}

void YamlFields::read(const char* key, std::string& out) const {
  if (!has(key)) return;
  if (!node_[key].IsScalar()) fail(key, "expected a string");
  out = node_[key].Scalar();
}

YamlFields YamlFields::child(const char* key, std::initializer_list<const char*> allowed) const {
  std::string child_path = path_.empty() ? std::string(key) : path_ + "." + key;
  return YamlFields(node_[key], origin_, child_path, allowed);
}

}  // namespace tpf::plan
