#!/usr/bin/env bash
# Checks that an installed tpfabric is usable from outside the source tree:
#   - `cmake --install` of a built tree into a temporary prefix (which also proves relocation:
#     the prefix is chosen after configure time);
#   - tests/consumer built with find_package(tpfabric) against the shared and the static library;
#   - the same main.cc built with plain g++ and pkg-config, shared and static (--static);
#   - each consumer run (prints "bf16"); the static ones also query the topology (hwloc linked);
#   - the installed `tpf run` launching the shared consumer on 2 ranks for an all-reduce;
#   - the installed Python package (where the build has one) under the installed `tpf run`.
#
# Usage: scripts/check-install.sh [BUILD_DIR] [--keep]
#   BUILD_DIR  a configured and built tree (default: build)
#   --keep     keep the temporary prefix and consumer builds, and print where they are
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

build_dir=build
keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "check-install.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
    *) build_dir=$arg ;;
  esac
done
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  echo "check-install.sh: '$build_dir' is not a configured CMake build tree; build first" \
       "(scripts/quickstart.sh or cmake -S . -B build -G Ninja && cmake --build build)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tpf-check-install.XXXXXX")
cleanup() {
  if (( keep )); then
    echo "check-install.sh: kept $work"
  else
    rm -rf -- "$work"
  fi
}
trap cleanup EXIT
prefix=$work/prefix

fail() {
  echo "check-install.sh: FAIL: $*" >&2
  exit 1
}

# expect_output WHAT EXPECTED_FIRST_LINE COMMAND...: runs a consumer and checks what it printed.
expect_output() {
  local what=$1 expected=$2
  shift 2
  local out
  out=$("$@") || fail "$what: '$*' exited with $?"
  [[ "$(head -n 1 <<<"$out")" == "$expected" ]] ||
    fail "$what: expected first line '$expected', got: $out"
  echo "  ok  $what: $(tr '\n' ' ' <<<"$out")"
}

echo "check-install.sh: installing $build_dir into $prefix"
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "cmake --install $build_dir"; }

libdir_rel=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build_dir/CMakeCache.txt")
libdir=$prefix/${libdir_rel:-lib}
for f in "$prefix/bin/tpf" "$prefix/include/tpf/tpf.h" "$prefix/include/tpf/comm.h" \
         "$libdir/libtpfabric.so" "$libdir/libtpfabric.a" "$libdir/pkgconfig/tpfabric.pc" \
         "$libdir/cmake/tpfabric/tpfabricConfig.cmake" \
         "$libdir/cmake/tpfabric/tpfabricConfigVersion.cmake" \
         "$libdir/cmake/tpfabric/tpfabricTargets.cmake"; do
  [[ -e "$f" ]] || fail "not installed: ${f#"$prefix/"}"
done
# Installed package files must not point back into the source or build tree.
source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build_dir/CMakeCache.txt")
if grep -rl -e "$repo" -e "${source_dir:-$repo}" -e "$(cd "$build_dir" && pwd)" "$libdir/cmake/tpfabric" \
     "$libdir/pkgconfig/tpfabric.pc"; then
  fail "the package files above refer to the source or build tree"
fi
echo "  ok  installed files present and relocatable"

# --- CMake consumers --------------------------------------------------------------------------
for linkage in shared static; do
  cdir=$work/consumer-cmake-$linkage
  static=OFF
  [[ $linkage == static ]] && static=ON
  if ! { cmake -S tests/consumer -B "$cdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_PREFIX_PATH="$prefix" -DTPF_CONSUMER_STATIC=$static &&
          cmake --build "$cdir"; } >"$cdir.log" 2>&1; then
    cat "$cdir.log" >&2
    fail "building the CMake consumer ($linkage)"
  fi
  # ldd's output is captured first: `ldd | grep -q` fails under pipefail when grep exits early.
  deps=$(ldd "$cdir/consumer")
  if [[ $linkage == shared ]]; then
    grep -q "$libdir/libtpfabric.so" <<<"$deps" ||
      fail "CMake consumer (shared) does not load libtpfabric.so from $libdir: $deps"
    expect_output "find_package, shared" bf16 "$cdir/consumer"
  else
    if grep -q libtpfabric <<<"$deps"; then
      fail "CMake consumer (static) links libtpfabric.so dynamically: $deps"
    fi
    expect_output "find_package, static" bf16 "$cdir/consumer" --topo
  fi
done

# --- pkg-config consumers (plain compiler command, no build system) --------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pkg-config --exists --print-errors tpfabric || fail "pkg-config cannot find tpfabric"
pc_version=$(pkg-config --modversion tpfabric)
pc_libdir=$(pkg-config --variable=libdir tpfabric)
# The .pc file is relocatable, so its libdir reads ".../pkgconfig/../../lib": compare resolved.
[[ "$(cd "$pc_libdir" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ]] ||
  fail "tpfabric.pc resolves libdir to '$pc_libdir', expected $libdir"
CXX=${CXX:-g++}

read -ra cflags <<<"$(pkg-config --cflags tpfabric)"
read -ra libs <<<"$(pkg-config --libs tpfabric)"
"$CXX" -std=c++20 -O1 "${cflags[@]}" tests/consumer/main.cc -o "$work/consumer-pc-shared" \
  "${libs[@]}" -Wl,-rpath,"$libdir" || fail "compiling with pkg-config --cflags --libs"
deps=$(ldd "$work/consumer-pc-shared")
grep -q "$libdir/libtpfabric.so" <<<"$deps" ||
  fail "pkg-config consumer (shared) does not load libtpfabric.so from $libdir: $deps"
expect_output "pkg-config $pc_version, shared" bf16 "$work/consumer-pc-shared"

# For the static check the linker must see only the archive, so point libdir at a folder that
# holds nothing else; what links then comes from Libs + Libs.private alone.
mkdir "$work/static-only"
ln -s "$libdir/libtpfabric.a" "$work/static-only/libtpfabric.a"
read -ra libs <<<"$(pkg-config --static --libs --define-variable=libdir="$work/static-only" tpfabric)"
"$CXX" -std=c++20 -O1 "${cflags[@]}" tests/consumer/main.cc -o "$work/consumer-pc-static" \
  "${libs[@]}" || fail "linking with pkg-config --static --libs"
deps=$(ldd "$work/consumer-pc-static")
if grep -q libtpfabric <<<"$deps"; then
  fail "pkg-config consumer (static) links libtpfabric.so dynamically: $deps"
fi
expect_output "pkg-config $pc_version, static" bf16 "$work/consumer-pc-static" --topo

# --- the installed launcher running an installed-library program -----------------------------
out=$(timeout 120 "$prefix/bin/tpf" run -n 2 -- "$work/consumer-cmake-shared/consumer" --world) ||
  fail "'tpf run -n 2 -- consumer --world' exited with $?: $out"
for rank in 0 1; do
  grep -q "rank $rank/2: sum=3 (expected 3)" <<<"$out" ||
    fail "'tpf run -n 2 -- consumer --world': no correct line from rank $rank in: $out"
done
echo "  ok  installed tpf run -n 2 -- consumer --world"

# --- the installed Python package, where the build has one ------------------------------------
if grep -q '^TPF_PYTHON_INSTALL_DIR:' "$build_dir/CMakeCache.txt"; then
  python_dir=$prefix/$(sed -n 's/^TPF_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  # The interpreter the package was built for.
  python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  [[ -e "$python_dir/tpfabric/__init__.py" ]] ||
    fail "not installed: ${python_dir#"$prefix/"}/tpfabric"
  cat > "$work/python_world.py" <<'PY'
import array, tpfabric
comm = tpfabric.Communicator.from_env()
x = array.array("d", [comm.rank + 1.0])
comm.all_reduce(x)
print(f"python rank {comm.rank}/{comm.size}: sum={x[0]:g}")
PY
  out=$(cd "$work" && PYTHONPATH=$python_dir timeout 120 "$prefix/bin/tpf" run -n 2 -- \
        "${python:-python3}" "$work/python_world.py") ||
    fail "the installed Python package under tpf run -n 2 exited with $?: $out"
  for rank in 0 1; do
    grep -q "python rank $rank/2: sum=3" <<<"$out" ||
      fail "installed Python package: no correct line from rank $rank in: $out"
  done
  echo "  ok  installed Python package (PYTHONPATH=${python_dir#"$prefix/"}) under tpf run -n 2"
fi
echo "check-install.sh: PASS"
