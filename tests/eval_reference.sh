#!/usr/bin/env bash
# ctest eval_reference: `baton eval` checked three ways on a trained gpt-tiny.
#   1. eval on 1 and on 4 stages prints the same loss, to the last bit;
#   2. that loss equals the eval_loss training logged after its last step (train.eval_every), and
#      evaluating leaves metrics.jsonl as it was;
#   3. an independent plain-Python GPT-2 (tests/eval_reference.py) reading only `baton export`'s
#      files computes the same mean loss on the same held-out windows (to 1e-5, float32 vs
#      float64).
# And the two refusals: no held-out data, no weights.
#
#   tests/eval_reference.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: eval_reference.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/eval-reference.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
json_field() { python3 -c 'import json,sys; print(repr(json.loads(sys.stdin.readline())[sys.argv[1]]))' "$1"; }

data=/usr/share/common-licenses
[ -d "$data" ] || { echo "$data is absent: skipped"; exit 77; }
held_out=(--set data.eval_fraction=0.02 --set train.eval_batches=2)
common=(configs/gpt-tiny.yaml --set device.type=cpu --set output.dir="$work/out" "${held_out[@]}")

# Train 30 steps on 4 stages, evaluating after step 15 and after the last.
"$build/baton" run "${common[@]}" --set train.steps=30 --set train.eval_every=15 \
  > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training failed"; }
grep -q "step    30/30 | loss [0-9.]* | eval [0-9.]*" "$work/train.log" ||
  fail "the last progress line carries no eval loss"
logged=$(tail -n 1 "$work/out/metrics.jsonl" | json_field eval_loss) || fail "metrics.jsonl has no eval_loss"
before=$(md5sum < "$work/out/metrics.jsonl")

# 1 and 2: the same held-out windows on 1 and 4 stages (and 2 x 2 replicas), from the final
# checkpoint.
for stages in 1 4; do
  "$build/baton" eval "${common[@]}" --set parallel.stages=$stages --resume auto --json \
    > "$work/eval$stages.json" 2> "$work/eval$stages.log" || { cat "$work/eval$stages.log"; fail "eval on $stages stage(s) failed"; }
done
one=$(json_field loss < "$work/eval1.json")
four=$(json_field loss < "$work/eval4.json")
echo "eval loss: 1 stage $one, 4 stages $four, logged by training $logged"
[ "$one" = "$four" ] || fail "1 and 4 stages differ: $one vs $four"
# 2 stages x 2 data-parallel replicas: each replica evaluates half of every batch.
"$build/baton" eval "${common[@]}" --set parallel.stages=2 --set parallel.replicas=2 --resume auto \
  --json > "$work/eval2x2.json" 2> "$work/eval2x2.log" || { cat "$work/eval2x2.log"; fail "eval on 2 stages x 2 replicas failed"; }
replicated=$(json_field loss < "$work/eval2x2.json")
[ "$one" = "$replicated" ] || fail "1 stage and 2 stages x 2 replicas differ: $one vs $replicated"
[ "$one" = "$logged" ] || fail "baton eval $one differs from the eval_loss training logged, $logged"
[ "$(md5sum < "$work/out/metrics.jsonl")" = "$before" ] || fail "baton eval changed metrics.jsonl"

# 3: the independent GPT-2, on short windows so that plain Python takes seconds.
"$build/baton" export "$work/out" "$work/hf" > "$work/export.log" 2>&1 || { cat "$work/export.log"; fail "export failed"; }
small=(--set data.seq_len=32 --set train.batch_size=4 --set train.micro_batches=2 --set train.eval_batches=1)
loss=$("$build/baton" eval "${common[@]}" "${small[@]}" --set parallel.stages=2 --resume auto --json 2> "$work/small.log" |
  json_field loss) || { cat "$work/small.log"; fail "the short-window eval failed"; }
python3 tests/eval_reference.py "$work/hf" --data "$data" --eval-fraction 0.02 --seq-len 32 \
  --batch-size 4 --batches 1 --expect "$loss" || fail "the independent GPT-2 disagrees"

# Refusals, each naming what is missing.
"$build/baton" eval configs/gpt-tiny.yaml --set output.dir="$work/out" --resume auto > "$work/no-data.log" 2>&1 &&
  fail "eval without held-out data succeeded"
grep -q "baton eval needs held-out data: set data.eval_path or data.eval_fraction" "$work/no-data.log" ||
  { cat "$work/no-data.log"; fail "no clear error without held-out data"; }
"$build/baton" eval configs/gpt-tiny.yaml "${held_out[@]}" --set output.dir="$work/empty" > "$work/no-weights.log" 2>&1 &&
  fail "eval without weights succeeded"
grep -q "baton eval needs weights: --resume DIR" "$work/no-weights.log" ||
  { cat "$work/no-weights.log"; fail "no clear error without weights"; }
echo "PASS"
