#!/usr/bin/env bash
# `baton tune` end to end on gpt-tiny: the ranked table prints, the written config loads and plans
# (`baton plan`) to the cut and schedule the tuner chose. Fast: one repetition per measurement.
#
#   tests/tune_command.sh BUILD_DIR
set -euo pipefail

build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/baton" tune configs/gpt-tiny.yaml --memory-budget 64MiB --max-processes 2 --repeats 1 \
  --set train.batch_size=4 --set train.micro_batches=2 --out "$work/tuned.yaml" >"$work/tune.txt"
cat "$work/tune.txt"
grep -q '^rank schedule' "$work/tune.txt"
grep -Eq '^ +1 ' "$work/tune.txt"
grep -q '^searched [0-9]* candidates' "$work/tune.txt"
grep -q "^wrote $work/tuned.yaml" "$work/tune.txt"

cut=$(sed -n 's/^  cut: *"\{0,1\}\([-0-9,]*\)"\{0,1\}$/\1/p' "$work/tuned.yaml")
[ -n "$cut" ] || { echo "tuned.yaml has no parallel.cut" >&2; exit 1; }
"$build/baton" plan "$work/tuned.yaml" >"$work/plan.txt"
cat "$work/plan.txt"
# The plan is cut where the tuner said: every range of the cut is a row of the partition table.
for range in ${cut//,/ }; do
  grep -Eq "^ +[0-9]+ +[0-9]+ +$range " "$work/plan.txt" ||
    { echo "baton plan did not cut at $range" >&2; exit 1; }
done
echo "tune_command: ok (cut $cut)"
