// libtpfabric.so exports the public API only (include/tpf/export.h, cmake/tpfabric.map): the C API
// and the C++ API of include/tpf/, not the layers beneath them. A leak makes internals part of the
// ABI that users can link against and that a later release would break.
#include <gtest/gtest.h>
#include <stdio.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {

// Demangled names of the shared library's exported (defined, dynamic) symbols.
std::vector<std::string> exported_symbols() {
  const std::string command =
      std::string("nm -D --defined-only -C --format=posix '") + TPF_SHARED_LIBRARY + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << command << ":\n" << text;
  std::vector<std::string> names;
  // POSIX format: "name type value size"; the name may contain blanks, the rest does not.
  const std::regex line("^(.*) [A-Za-z] [0-9a-f]+( [0-9a-f]+)?$");
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::smatch m;
    const std::string row = text.substr(start, end - start);
    if (std::regex_match(row, m, line)) names.push_back(m[1].str());
    start = end + 1;
  }
  return names;
}

TEST(LibraryAbi, ExportsThePublicApiOnly) {
  const std::vector<std::string> names = exported_symbols();
  ASSERT_GT(names.size(), 50u) << "nm found too few symbols in " << TPF_SHARED_LIBRARY;
  // Public: the C API, and C++ names in namespace tpf outside its internal namespaces.
  const std::regex public_name(
      "(tpf_[a-z_0-9]+|((typeinfo|typeinfo name|vtable) for )?tpf::[^:(]+(::[^:(]+)?([(\\[@ ].*)?|"
      "TPFABRIC_0)");
  const std::regex internal(
      "tpf::(base|bootstrap|transport|coll|comm|topo|detail|cli|plan)::.*|"
      ".*::Impl::.*");
  std::set<std::string> leaked;
  for (const std::string& name : names) {
    const std::string plain = name.substr(0, name.find("@@"));
    if (!std::regex_match(plain, public_name) ||
        std::regex_match(plain.substr(0, plain.find('(')), internal)) {
      leaked.insert(plain);
    }
  }
  std::string list;
  for (const std::string& name : leaked) list += "  " + name + "\n";
  EXPECT_TRUE(leaked.empty()) << leaked.size() << " internal symbols are exported:\n" << list;
  // And the API itself is there: hiding too much breaks every user.
  std::set<std::string> plain_names;
  for (const std::string& name : names) plain_names.insert(name.substr(0, name.find("@@")));
  for (const char* wanted :
       {"tpf_comm_create", "tpf_all_reduce", "tpf_last_error", "typeinfo for tpf::Error",
        "typeinfo for tpf::Store", "tpf::detect_launch_env()", "tpf::Work::wait()"}) {
    EXPECT_TRUE(plain_names.count(wanted)) << wanted << " is not exported";
  }
}

}  // namespace
