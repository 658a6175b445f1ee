#!/usr/bin/env bash
# ctest tensorboard_reference: a 2-stage gpt-tiny run with output.tensorboard, resumed once (a
# second event file in the same folder), read back by TensorBoard's own event reader
# (tests/tensorboard_check.py) against metrics.jsonl. Skipped (77) without the tensorboard package.
#
#   tests/tensorboard_reference.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: tensorboard_reference.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
python3 -c 'import tensorboard' 2>/dev/null || {
  echo "the tensorboard Python package is not installed: skipped (pip install tensorboard)"
  exit 77
}
work=$(mktemp -d "${TMPDIR:-/tmp}/tensorboard-reference.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

run=(configs/gpt-tiny.yaml --set device.type=cpu --set output.dir="$work/out"
  --set output.tensorboard=true --set parallel.stages=2 --set data.eval_fraction=0.02
  --set train.eval_batches=1 --set train.eval_every=2 --log-level warn)
"$build/baton" run "${run[@]}" --set train.steps=4 > "$work/first.log" 2>&1 ||
  { cat "$work/first.log"; echo "FAIL: the first run failed"; exit 1; }
"$build/baton" run "${run[@]}" --set train.steps=6 --resume auto > "$work/second.log" 2>&1 ||
  { cat "$work/second.log"; echo "FAIL: the resumed run failed"; exit 1; }
files=$(find "$work/out/tensorboard" -name 'events.out.tfevents.*' | wc -l)
[ "$files" -eq 2 ] || { echo "FAIL: $files event files, expected 2 (one per run)"; exit 1; }
python3 tests/tensorboard_check.py "$work/out"
