#!/usr/bin/env bash
# tests/repeat.sh N [REGEX] [BUILD_DIR]: runs each ctest test matching REGEX (default: every test
# labelled integration) N times, one run at a time, beside CPU burners (one busy loop per core),
# and prints each test's pass count ("12/50 passed: NAME"), the failures' logs, and a total. Exits
# 1 if any run failed. Flaky tests show up here; timing-dependent ones fail.
#
#   tests/repeat.sh 50 'slurm_rehearsal|Sigterm'     # 50 runs of each, under load
#   tests/repeat.sh 5                                # every integration test, 5 times
set -uo pipefail

runs=${1:?usage: tests/repeat.sh N [REGEX] [BUILD_DIR]}
regex=${2:-}
build=${3:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) ;; *) build="$root/$build" ;; esac
[ -f "$build/CTestTestfile.cmake" ] || { echo "repeat: no ctest tree in $build: build first" >&2; exit 2; }

select=(-L integration)
[ -n "$regex" ] && select=(-R "$regex")
mapfile -t tests < <(ctest --test-dir "$build" -N "${select[@]}" |
  sed -n 's/^ *Test *#[0-9]*: \(.*\)$/\1/p')
[ ${#tests[@]} -gt 0 ] || { echo "repeat: no test matches ${select[*]}" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-repeat.XXXXXX")
# shellcheck source=tests/cpu_burners.sh
. "$root/tests/cpu_burners.sh"
start_burners "$work"

echo "repeat: ${#tests[@]} test(s) x $runs run(s) beside $(nproc) CPU burner(s)"
total_failed=0
start=$(date +%s)
for test in "${tests[@]}"; do
  passed=0
  for i in $(seq 1 "$runs"); do
    log="$work/run.log"
    # Exact name: ctest -R takes a regex, so escape it and anchor both ends.
    name_regex="^$(printf '%s' "$test" | sed 's/[][\.*^$+?(){}|/]/\\&/g')\$"
    if ctest --test-dir "$build" -R "$name_regex" --output-on-failure > "$log" 2>&1; then
      passed=$((passed + 1))
    else
      total_failed=$((total_failed + 1))
      echo "--- $test, run $i of $runs failed:"
      tail -n 40 "$log"
    fi
  done
  echo "$passed/$runs passed: $test"
done
echo "repeat: $total_failed failed run(s) in $(($(date +%s) - start)) s, load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg) (with $(nproc) burners)"
[ "$total_failed" -eq 0 ]
