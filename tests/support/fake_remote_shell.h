// A stand-in for ssh in a temporary directory, for `tpf run --hosts H:N,... --rsh PATH`:
// `PATH HOST COMMAND...` runs COMMAND here with AGENT_HOST=HOST (and, where asked,
// TPF_NODE_ID=HOST, so that each named host is a host of its own to the fabric; where asked, with
// an empty directory at `private_dir`, as another machine does not have this one's, and HOST as
// its name: mount and UTS namespaces with a tmpfs there, which needs root, as CI has; where
// asked, in a session of its own, as sshd starts it, so that the launcher's signals to the shell
// do not reach it and the shell's end does not end it), except for the host "down", which it
// cannot reach (exit 255, as ssh).
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace tpf::testing {

class FakeRemoteShell {
 public:
  enum class Hosts { one_machine, named_nodes };
  // launchers: the command runs in the shell's process group (the launcher's rank group);
  // own: in a session of its own, the shell waiting for it (setsid -w).
  enum class Session { launchers, own };
  explicit FakeRemoteShell(Hosts hosts = Hosts::one_machine, const std::string& private_dir = "",
                           Session session = Session::launchers) {
    char dir[] = "/tmp/tpf-rsh-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    path_ = dir_ + "/fake-ssh";
    FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) return;
    // The launcher's variables follow as `env VAR=...`, so a TPF_NODE_ID it passes on wins.
    const std::string node = hosts == Hosts::one_machine ? "" : " TPF_NODE_ID=\"$host\"";
    // (A directory name without quotes or blanks: tests pass their own scratch directories.
    // Appended piecewise: GCC 12 -O3 warns falsely on "..." + std::string.)
    std::string wrappers = session == Session::own ? "setsid -w " : "";
    if (!private_dir.empty()) {
      wrappers += "unshare --mount --uts --propagation private sh -c 'mount -t tmpfs tmpfs ";
      wrappers += private_dir;
      wrappers += " && hostname \"$1\" && shift && exec \"$@\"' sh \"$host\" ";
    }
    const std::string script =
        "#!/bin/sh\n"
        "if [ \"$1\" = down ]; then echo \"fake-ssh: cannot reach $1\" >&2; exit 255; fi\n"
        "host=$1\nshift\nexec " +
        wrappers + "env AGENT_HOST=\"$host\"" + node + " \"$@\"\n";
    std::fputs(script.c_str(), f);
    ok_ = std::fclose(f) == 0 && ::chmod(path_.c_str(), 0755) == 0;
  }
  ~FakeRemoteShell() {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  FakeRemoteShell(const FakeRemoteShell&) = delete;
  FakeRemoteShell& operator=(const FakeRemoteShell&) = delete;
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
  bool ok_ = false;
};

}  // namespace tpf::testing
