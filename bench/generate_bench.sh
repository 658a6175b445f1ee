#!/usr/bin/env bash
# bench/generate_bench.sh [BUILD]: `baton generate` with and without the key-value cache
# (bench/README.md, "generate_bench"). Trains a short gpt-tiny checkpoint with model.context=256
# (so that prompt + 200 new tokens stay inside the context), then times 200 new tokens both ways,
# sampled and greedy, each REPEATS times alternating, and prints each way's fastest tokens/s and
# their ratio. Check: both ways print the same text every time; exits 1 if they differ or a
# command fails. Then a rotary model past its context: a short llama-tiny checkpoint (context
# 128), greedy with the cache, 100 new tokens (inside the context) against 500 (past it, where
# the cache slides: model/decode.h), each way's fastest tokens/s and the ratio past / inside.
# Then a file of 8 prompts from the gpt-tiny checkpoint, greedy, --batch 1 against --batch 8:
# each way's fastest tokens/s (every prompt's new tokens) and the ratio; check: the same text.
#
# Environment: GENERATE_TOKENS (default 200), GENERATE_THREADS (device.threads, default 1),
# BENCH_REPEATS (default 3).
set -euo pipefail

build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
baton="$build/baton"
tokens=${GENERATE_TOKENS:-200}
threads=${GENERATE_THREADS:-1}
repeats=${BENCH_REPEATS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/baton_generate_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "generate_bench: $(nproc) CPUs, $(grep -o -m1 avx512_bf16 /proc/cpuinfo || echo 'no avx512_bf16'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$baton" run "$root/configs/gpt-tiny.yaml" --set model.context=256 --set parallel.stages=1 \
  --set train.steps=50 --set output.dir="$work/run" >"$work/train.log" 2>&1 ||
  { tail -20 "$work/train.log"; exit 1; }

# rate LOG: the tokens/s of the log's "generated N tokens in S s" line.
rate() {
  sed -n 's/.*generated \([0-9]*\) tokens in \([0-9.]*\) s:.*/\1 \2/p' "$1" |
    awk '{ printf "%.1f", $1 / $2 }'
}

# generate_once MODE TEMPERATURE: the text on stdout into $work/MODE.txt, the log into
# $work/MODE.log; echoes the log line's tokens/s recomputed from its token count and seconds.
generate_once() {
  local mode=$1 temperature=$2 flags=()
  [[ $mode == recompute ]] && flags=(--no-kv-cache)
  "$baton" generate "$work/run" --prompt "The license" --tokens "$tokens" --seed 1 \
    --temperature "$temperature" --set device.threads="$threads" "${flags[@]}" \
    >"$work/$mode.txt" 2>"$work/$mode.log"
  rate "$work/$mode.log"
}

faster() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }

status=0
for temperature in 0.8 0; do
  cached=0
  recomputed=0
  for ((r = 0; r < repeats; ++r)); do
    cached=$(faster "$cached" "$(generate_once cached "$temperature")")
    recomputed=$(faster "$recomputed" "$(generate_once recompute "$temperature")")
    if ! cmp -s "$work/cached.txt" "$work/recompute.txt"; then
      echo "temperature $temperature: the KV cache printed other text than --no-kv-cache"
      diff "$work/cached.txt" "$work/recompute.txt" | head -5
      status=1
    fi
  done
  printf 'temperature %-3s %d new tokens: KV cache %8.1f tokens/s, recompute %7.1f tokens/s, ratio %.1fx\n' \
    "$temperature" "$tokens" "$cached" "$recomputed" "$(awk -v a="$cached" -v b="$recomputed" 'BEGIN { print a / b }')"
done
"$baton" run "$root/configs/llama-tiny.yaml" --set parallel.stages=1 --set train.steps=20 \
  --set output.dir="$work/llama" >"$work/llama-train.log" 2>&1 ||
  { tail -20 "$work/llama-train.log"; exit 1; }
llama_once() {  # llama_once TOKENS: tokens/s of a greedy cached generation
  "$baton" generate "$work/llama" --prompt "The license" --tokens "$1" --temperature 0 \
    --set device.threads="$threads" >"$work/llama.txt" 2>"$work/llama.log"
  rate "$work/llama.log"
}
inside=0
past=0
for ((r = 0; r < repeats; ++r)); do
  inside=$(faster "$inside" "$(llama_once 100)")
  past=$(faster "$past" "$(llama_once 500)")
done
printf 'llama-tiny (context 128), KV cache: 100 new tokens %8.1f tokens/s, 500 (past the context) %8.1f tokens/s, ratio %.2f\n' \
  "$inside" "$past" "$(awk -v a="$past" -v b="$inside" 'BEGIN { print a / b }')"
# A batch of prompts: 8 prompts of 3 to 40 bytes, 200 new tokens each (inside the context of 256)
# from the gpt-tiny checkpoint, greedy, one at a time (--batch 1) and all together (--batch 8).
printf '%s\n' "The" "The license" "Permission is hereby granted" "THE SOFTWARE IS PROVIDED" \
  "Redistribution and use in source" "Copyright" "the above copyright notice and this" \
  "WITHOUT WARRANTY" >"$work/prompts.txt"
batch_once() {  # batch_once N: tokens/s of the file's prompts decoded N at a time
  "$baton" generate "$work/run" --prompts "$work/prompts.txt" --batch "$1" --tokens "$tokens" \
    --temperature 0 --set device.threads="$threads" >"$work/batch$1.txt" 2>"$work/batch$1.log"
  rate "$work/batch$1.log"
}
single=0
batched=0
for ((r = 0; r < repeats; ++r)); do
  single=$(faster "$single" "$(batch_once 1)")
  batched=$(faster "$batched" "$(batch_once 8)")
  if ! cmp -s "$work/batch1.txt" "$work/batch8.txt"; then
    echo "--batch 8 printed other text than --batch 1"
    diff "$work/batch1.txt" "$work/batch8.txt" | head -5
    status=1
  fi
done
printf 'gpt-tiny, 8 prompts x %d new tokens, greedy: --batch 1 %8.1f tokens/s, --batch 8 %8.1f tokens/s, ratio %.2fx\n' \
  "$tokens" "$single" "$batched" "$(awk -v a="$batched" -v b="$single" 'BEGIN { print a / b }')"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
