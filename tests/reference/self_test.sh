#!/usr/bin/env bash
# Self-test of gpt_reference.py (the checks are in self_test.py): picks the interpreter and turns
# "no torch" into a skip, or into a failure in CI.
# Exit 0: all as expected; 1: some check misbehaved, or no Python with torch while CI is set (a
# reference test that skips in CI proves nothing); 77: no Python with torch outside CI (skip).
# Python: $PYTHON if set (CTest sets it to CMake's TPF_TEST_PYTHON), else the first of
# /usr/bin/python3, python3 that has torch: Debian's python3-torch lives in /usr/bin/python3; a
# pyenv/venv python3 earlier on PATH often lacks it.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONDONTWRITEBYTECODE=1  # do not leave __pycache__ in the source tree

# no_torch MESSAGE: skip (77), or fail (1) when CI is set to anything but "", 0 or false.
no_torch() {
  case "${CI:-}" in
    "" | 0 | false) echo "SKIP: $1"; exit 77 ;;
    *)
      echo "FAIL: $1; CI=$CI does not allow the reference self-test to skip" \
        "(Debian: scripts/install-deps.sh --with-tests installs python3-torch and python3-numpy)"
      exit 1
      ;;
  esac
}

if [[ -z "${PYTHON:-}" ]]; then
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch, numpy' 2>/dev/null; then
      PYTHON="$p"
      break
    fi
  done
  [[ -n "${PYTHON:-}" ]] || no_torch "no python3 with torch and numpy (tried /usr/bin/python3, python3)"
fi
command -v "$PYTHON" >/dev/null || no_torch "PYTHON=$PYTHON is not an executable"
"$PYTHON" "$HERE/self_test.py"
rc=$?
# 77 comes from gpt_reference.py's import (it prints which module is missing).
(( rc == 77 )) && no_torch "PYTHON=$PYTHON cannot import torch and numpy"
exit "$rc"
