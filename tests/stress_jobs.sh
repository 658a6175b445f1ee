#!/usr/bin/env bash
# tests/stress_jobs.sh [BUILD] [JOBS]: runs JOBS (default 200) short 2-stage gpt-tiny jobs back
# to back while CPU burners (one busy loop per core) run beside them, and counts the jobs that
# were reported failed. Exits 1 if any was, after printing its log. Each job trains 4 steps and
# checkpoints every step, so the step reports, the checkpoint barriers and the final `done` all
# race against the burners. Not in ctest: it takes about 10 minutes on 2 cores.
set -uo pipefail

build=${1:-build}
jobs=${2:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) baton="$build/baton" ;; *) baton="$root/$build/baton" ;; esac
[ -x "$baton" ] || { echo "no $baton: build first"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/baton_stress.XXXXXX")
# shellcheck source=tests/cpu_burners.sh
. "$root/tests/cpu_burners.sh"
start_burners "$work"

failed=0
start=$(date +%s)
for i in $(seq 1 "$jobs"); do
  log="$work/job-$i.log"
  if ! "$baton" run "$root/configs/gpt-tiny.yaml" --set train.steps=4 --set parallel.stages=2 \
      --set output.checkpoint_every=1 --set "output.dir=$work/out" > "$log" 2>&1; then
    failed=$((failed + 1))
    echo "job $i of $jobs was reported failed:"
    tail -n 30 "$log"
  fi
  rm -rf "$work/out"
done
echo "stress: $jobs jobs, $failed reported failed, $(($(date +%s) - start)) s," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) (with $(nproc) burners)"
[ "$failed" -eq 0 ]
