#include "cli/line_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace tpf::cli {

void LinePrefixer::feed(const char* data, size_t size) {
  pending_.append(data, size);
  std::string out;
  size_t start = 0;
  while (true) {
    size_t newline = pending_.find('\n', start);
    if (newline == std::string::npos) {
      if (pending_.size() - start < kMaxLine) break;
      newline = start + kMaxLine - 1;  // cut an overlong line; the piece ends with its own '\n'
      out += prefix_;
      out.append(pending_, start, newline + 1 - start);
      out += '\n';
    } else {
      out += prefix_;
      out.append(pending_, start, newline + 1 - start);
    }
    start = newline + 1;
  }
  pending_.erase(0, start);
  if (!out.empty()) write_all(out);
}

void LinePrefixer::flush() {
  if (pending_.empty()) return;
  std::string out = prefix_ + pending_ + '\n';
  pending_.clear();
  write_all(out);
}

void LinePrefixer::write_all(const std::string& text) {
  size_t done = 0;
  while (!out_broken_ && done < text.size()) {
    ssize_t n = ::write(out_fd_, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EPIPE or a closed terminal: nobody reads the output any more. Dropping it is better than
      // killing the job over it.
      out_broken_ = true;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace tpf::cli
