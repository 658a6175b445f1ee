#!/usr/bin/env bash
# ctest structure_reference: the structural cures end to end on gpt-tiny (docs/model.md,
# "Sharing and low rank"; docs/memory.md, "Low rank after training").
#   1. a shared model (model.share.group=2) trains on 2 stages (groups kept within stages),
#      resumes from its step-10 checkpoint on 1 stage to the same losses bit for bit, and on 3
#      stages (a group split) to within 1e-5; its export materialises every block, and the
#      independent plain-Python GPT-2 (tests/eval_reference.py) reproduces Baton's eval loss;
#   2. a low-rank model (model.low_rank C/4) trains, and its export (U V multiplied out) does too;
#   3. baton compress --low-rank of a dense checkpoint: at full rank (C) the eval loss is the dense
#      model's within 1e-4 relative; at C/4 it prints the change; training goes on from the result
#      (model.init_from).
#
#   tests/structure_reference.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: structure_reference.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/structure-reference.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
json_field() { python3 -c 'import json,sys; print(repr(json.loads(sys.stdin.readline())[sys.argv[1]]))' "$1"; }
# The loss of each step of a metrics.jsonl from step $2 on, one per line.
losses_from() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and r.get("step", 0) >= int(sys.argv[2]):
        print(r["step"], repr(r["loss"]))' "$1" "$2"; }

data=/usr/share/common-licenses
[ -d "$data" ] || { echo "$data is absent: skipped"; exit 77; }
held_out=(--set data.eval_fraction=0.05 --set train.eval_batches=4)
common=(configs/gpt-tiny.yaml --set device.type=cpu --set train.steps=20 "${held_out[@]}")
small=(--set data.seq_len=32 --set train.batch_size=4 --set train.micro_batches=2 --set train.eval_batches=1)

# Evaluates output dir $1 (config overrides after it) on short windows with Baton and with the
# independent GPT-2 reading its export; fails unless they agree.
check_reference() {
  local out=$1 name=$2
  shift 2
  "$build/baton" export "$out" "$work/$name-hf" > "$work/$name-export.log" 2>&1 ||
    { cat "$work/$name-export.log"; fail "$name: export failed"; }
  local loss
  loss=$("$build/baton" eval "${common[@]}" "$@" "${small[@]}" --set output.dir="$out" --resume auto --json \
    2> "$work/$name-small.log" | json_field loss) || { cat "$work/$name-small.log"; fail "$name: the short-window eval failed"; }
  python3 tests/eval_reference.py "$work/$name-hf" --data "$data" --eval-fraction 0.05 --seq-len 32 \
    --batch-size 4 --batches 1 --expect "$loss" || fail "$name: the independent GPT-2 disagrees"
}

# 1. Sharing.
share=(--set model.share.group=2)
"$build/baton" run "${common[@]}" "${share[@]}" --set parallel.stages=2 --set output.checkpoint_every=10 \
  --set output.dir="$work/share" > "$work/share.log" 2>&1 || { cat "$work/share.log"; fail "shared training failed"; }
grep -q "share group split" "$work/share.log" && { grep "share group split" "$work/share.log"; fail "2 stages split a share group of 2"; }
step10=$(find "$work/share/checkpoints" -maxdepth 1 -name 'step-*10' | head -n 1)
[ -d "$step10" ] || fail "no step-10 checkpoint"
"$build/baton" run "${common[@]}" "${share[@]}" --set parallel.stages=1 --set output.dir="$work/share1" \
  --resume "$step10" > "$work/share1.log" 2>&1 || { cat "$work/share1.log"; fail "resuming on 1 stage failed"; }
[ "$(losses_from "$work/share/metrics.jsonl" 11)" = "$(losses_from "$work/share1/metrics.jsonl" 11)" ] ||
  { paste <(losses_from "$work/share/metrics.jsonl" 11) <(losses_from "$work/share1/metrics.jsonl" 11); fail "2 -> 1 stage resume is not exact"; }
"$build/baton" run "${common[@]}" "${share[@]}" --set parallel.stages=3 --set output.dir="$work/share3" \
  --resume "$step10" > "$work/share3.log" 2>&1 || { cat "$work/share3.log"; fail "resuming on 3 stages failed"; }
python3 - "$work/share/metrics.jsonl" "$work/share3/metrics.jsonl" <<'PY' || fail "2 -> 3 stage resume drifted"
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(11, 21))
print(f"2 -> 3 stages (a split group): worst relative loss difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
check_reference "$work/share" share "${share[@]}"

# 2. Low rank.
low=(--set model.low_rank.attn=32 --set model.low_rank.mlp=32)
"$build/baton" run "${common[@]}" "${low[@]}" --set parallel.stages=2 --set output.dir="$work/low" \
  > "$work/low.log" 2>&1 || { cat "$work/low.log"; fail "low-rank training failed"; }
check_reference "$work/low" low "${low[@]}"

# 3. compress --low-rank of a dense checkpoint.
"$build/baton" run "${common[@]}" --set parallel.stages=2 --set output.dir="$work/dense" \
  > "$work/dense.log" 2>&1 || { cat "$work/dense.log"; fail "dense training failed"; }
"$build/baton" compress "$work/dense" "$work/full" --low-rank 128 "${held_out[@]}" > "$work/full.log" 2>&1 ||
  { cat "$work/full.log"; fail "compress --low-rank 128 failed"; }
cat "$work/full.log"
python3 - "$work/full.log" <<'PY' || fail "full rank changed the eval loss"
import re, sys
text = open(sys.argv[1]).read()
before, after = map(float, re.search(r"eval loss: ([0-9.]+) -> ([0-9.]+)", text).groups())
assert "low rank 128: 16 matrices" in text, text
rel = abs(after - before) / before
print(f"full rank: eval loss {before} -> {after} (relative {rel:.2e})")
sys.exit(0 if rel <= 1e-4 else 1)
PY
"$build/baton" compress "$work/dense" "$work/quarter" --low-rank 32 "${held_out[@]}" > "$work/quarter.log" 2>&1 ||
  { cat "$work/quarter.log"; fail "compress --low-rank 32 failed"; }
cat "$work/quarter.log"
grep -q "low rank 32: 16 matrices, .* bytes (0.333x)" "$work/quarter.log" || fail "rank 32 should keep 0.3125 of the bytes"
grep -qE "eval loss: [0-9.]+ -> [0-9.]+ \([+-][0-9.]+%\)" "$work/quarter.log" || fail "no eval loss change printed"
"$build/baton" run "$work/quarter/config.yaml" --set model.init_from="$work/quarter" --set output.dir="$work/tuned" \
  --set train.steps=3 > "$work/tuned.log" 2>&1 || { cat "$work/tuned.log"; fail "training from the low-rank result failed"; }
grep -q "initialised from the weights of" "$work/tuned.log" || { cat "$work/tuned.log"; fail "init_from did not load the checkpoint"; }
echo "PASS"
