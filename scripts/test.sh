#!/usr/bin/env bash
# The full check, as CI runs it (.ci/run):
#   1. install the build and test dependencies (install-deps.sh --with-tests: no-op when present;
#      the PyTorch reference tests need python3-torch, and fail rather than skip under CI=true)
#   2. build build/ (Release, Ninja; an existing build/ is reused as configured) and run its tests
#   3. build build-asan/ with ASan + UBSan (no benchmarks) and run the tests again
#   4. install build/ into a temporary prefix and build a consumer against it (check-install.sh)
# Every step runs even if an earlier independent one failed; the summary at the end lists each
# step, and the exit status is non-zero if any failed.
# TPF_JOBS=N limits the compile jobs (default: all cores).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
jobs=${TPF_JOBS:-$(nproc)}
readonly jobs

step_names=()
step_results=()
step_seconds=()
failed=0

# run_step NAME COMMAND...: runs the command, records PASS/FAIL and its duration.
run_step() {
  local name=$1
  shift
  echo
  echo "=== test.sh: $name"
  local start=$SECONDS
  if "$@"; then
    step_results+=(PASS)
  else
    step_results+=("FAIL (exit $?)")
    failed=1
  fi
  step_names+=("$name")
  step_seconds+=($((SECONDS - start)))
}

skip_step() {
  step_names+=("$1")
  step_results+=("SKIPPED ($2)")
  step_seconds+=(0)
  failed=1
}

last_passed() { [[ "${step_results[-1]}" == PASS ]]; }

# configure_and_build DIR CMAKE_ARGS...: configures DIR only if it has no cache yet.
configure_and_build() {
  local dir=$1
  shift
  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    cmake -S . -B "$dir" -G Ninja "$@" || return
  fi
  cmake --build "$dir" -j"$jobs"
}

# Multi-process tests: two at a time is right for the 2-core machines CI runs on. The output is
# also kept in DIR/Testing/test-sh.log so that the summary can repeat what the failed tests said,
# and each multi-process run's time beside its deadline in DIR/Testing/run-times.log
# (tests/support/multiproc.cc).
run_tests() {
  mkdir -p "$1/Testing/Temporary"
  rm -f "$1/Testing/Temporary/LastTestsFailed.log" "$1/Testing/run-times.log"
  TPF_TEST_RUN_LOG="$(realpath "$1")/Testing/run-times.log" \
    ctest --test-dir "$1" --output-on-failure --no-tests=error -j2 2>&1 | tee "$1/Testing/test-sh.log"
}

# close_runs_report DIR: the multi-process runs that took more than half their deadline, the
# first sign that a busy machine will push one past it. Deadlines under 10 s are left out: those
# are tests' own, for runs meant to reach them (MultiprocHarness.DeadlineKillsRanksStillRunning).
close_runs_report() {
  local log=$1/Testing/run-times.log
  [[ -s "$log" ]] || return 0
  local close
  close=$(awk '$2 >= 10 && $1 > $2 / 2 { printf "  %6.1f s of %5.1f s  %s\n", $1, $2, $3 }' "$log" | sort -rn)
  [[ -n "$close" ]] || return 0
  echo
  echo "=== test.sh: multi-process runs past half their deadline in $1"
  echo "$close"
}

# failed_tests_report DIR: each failed test of DIR's last run, with the end of what it printed.
# Where only the tail of a CI log is kept, this is the part that says which test failed and why.
failed_tests_report() {
  local failed_list=$1/Testing/Temporary/LastTestsFailed.log log=$1/Testing/test-sh.log
  [[ -s "$failed_list" && -f "$log" ]] || return 0
  echo
  echo "=== test.sh: failed tests in $1"
  local number name
  while IFS=: read -r number name; do
    echo "--- $name (test #$number), the last 40 lines it printed:"
    # A test's block runs from its result line to the next line ctest prints about any test.
    awk -v id="Test +#$number: " '
      $0 ~ id && /(Failed|Timeout|Exception|Not Run)/ { inside = 1; print; next }
      inside && (/^ *[0-9]+\/[0-9]+ Test +#/ || /^ +Start +[0-9]+: /) { inside = 0 }
      inside && /^[0-9]+% tests passed/ { inside = 0 }
      inside { print }' "$log" | tail -n 40
  done < "$failed_list"
}

run_sanitized_tests() {
  # Leaks are errors; UBSan stops at the first finding and shows where it came from.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_tests "$1"
}

run_step "install dependencies" scripts/install-deps.sh --with-tests
if last_passed; then
  run_step "build (build/)" configure_and_build build -DCMAKE_BUILD_TYPE=Release
  if last_passed; then
    run_step "tests (build/)" run_tests build
    run_step "install check" scripts/check-install.sh build
  else
    skip_step "tests (build/)" "build failed"
    skip_step "install check" "build failed"
  fi

  # -O1 -g1: ASan's recommended level, and line tables are all a finding's stack needs (inlined
  # frames included). Against -O2 -g it halves the compile of an instrumented file (a test file
  # 46 -> 22 s, a CLI file 61 -> 31 s), and this build was CI's longest step; the tests do not
  # run slower for it.
  run_step "build (build-asan/, ASan+UBSan)" configure_and_build build-asan \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DTPF_SANITIZE=ON -DTPF_BUILD_BENCH=OFF
  if last_passed; then
    run_step "tests (build-asan/)" run_sanitized_tests build-asan
  else
    skip_step "tests (build-asan/)" "build failed"
  fi
fi

# The failures first, so that the summary stays the last thing printed.
for dir in build build-asan; do
  close_runs_report "$dir"
  failed_tests_report "$dir"
done
echo
echo "=== test.sh summary"
for i in "${!step_names[@]}"; do
  printf '  %-34s %-22s %5ds\n' "${step_names[$i]}" "${step_results[$i]}" "${step_seconds[$i]}"
done
if (( failed )); then
  echo "test.sh: FAILED"
  exit 1
fi
echo "test.sh: all steps passed"
