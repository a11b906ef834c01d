#include "formats/text_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tpf/error.h"

namespace tpf {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::invalid_argument,
                "cannot read " + what + " '" + path + "': " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error(ErrorCode::system, "cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw_system_error(ErrorCode::system, "rename '" + tmp + "' to '" + path + "'", errno);
  }
}

}  // namespace tpf
