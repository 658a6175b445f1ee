#!/usr/bin/env bash
# ctest slurm_rehearsal: deploy/slurm/train.sbatch run as Slurm would, with stand-in srun and
# scontrol (tests/slurm_stub/) that start the tasks as local processes with SLURM_* set:
#   - SIGTERM to the batch shell mid-run: the tasks finish their step, checkpoint and exit 0, the
#     script requeues the job and exits 0;
#   - the requeued script resumes (--resume auto) and ends with the parameter checksum of an
#     uninterrupted run;
#   - SIGTERM to tasks that exit 0 without writing a checkpoint: no requeue, the script fails.
#
#   tests/slurm_rehearsal.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: slurm_rehearsal.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-rehearsal.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

export PATH="$root/tests/slurm_stub:$PATH"
export SLURM_NTASKS=2 SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=localhost SLURM_JOB_NAME=rehearsal
export SLURM_CPUS_PER_TASK=1
export BATON="$build/baton" BATON_OUTPUT_DIR="$work/out" STUB_REQUEUE_LOG="$work/requeue.log"
# A free port for the coordinator: ask the kernel for one.
BATON_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export BATON_PORT
args=(configs/gpt-tiny.yaml --set device.type=cpu --set parallel.stages=2 --set train.log_every=1)

fail() {
  echo "FAIL: $*"
  exit 1
}
checksum() { sed -n 's/.*param checksum \([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

# 1. Started, then SIGTERM once step 3 is logged (an event, not a sleep).
bash deploy/slurm/train.sbatch "${args[@]}" --set train.steps=100000 > "$work/first.log" 2>&1 &
batch=$!
for _ in $(seq 1 1200); do
  grep -q "step     3/" "$work/first.log" && break
  kill -0 "$batch" 2>/dev/null || break
  sleep 0.1
done
grep -q "step     3/" "$work/first.log" || fail "step 3 never logged: $(tail -n 20 "$work/first.log")"
kill -TERM "$batch"
wait "$batch"
code=$?
[ "$code" = 0 ] || fail "the batch script exited $code after SIGTERM: $(tail -n 20 "$work/first.log")"
grep -q "requeue 4242" "$work/requeue.log" || fail "the job was not requeued"
stopped=$(sed 's/^step-0*//' "$work/out/checkpoints/latest")
[ -n "$stopped" ] || fail "no checkpoint after SIGTERM"
echo "stopped at step $stopped, checkpoint written, requeued"

# 2. The requeued job resumes and ends where an uninterrupted run does.
total=$((stopped + 3))
bash deploy/slurm/train.sbatch "${args[@]}" --set train.steps="$total" > "$work/second.log" 2>&1 ||
  fail "the requeued run failed: $(tail -n 20 "$work/second.log")"
grep -q "resumed from .*step-0*$stopped" "$work/second.log" || fail "the requeued run did not resume"
"$BATON" run "${args[@]}" --set train.steps="$total" --set output.dir="$work/straight" \
  > "$work/straight.log" 2>&1 || fail "the uninterrupted run failed"
resumed=$(checksum "$work/second.log")
straight=$(checksum "$work/straight.log")
if [ -z "$straight" ] || [ "$resumed" != "$straight" ]; then
  fail "checksum after requeue $resumed, uninterrupted $straight"
fi
echo "requeued run resumed from step $stopped; checksum $resumed equals the uninterrupted run's"

# 3. Tasks that exit 0 on SIGTERM without writing a checkpoint (a stand-in binary): the script
# must not requeue (the requeued job would start over) and must fail, saying why.
cat > "$work/no-checkpoint" <<'EOF2'
#!/usr/bin/env bash
trap 'exit 0' TERM
touch "$STUB_STARTED.$SLURM_PROCID"
while :; do sleep 0.05; done
EOF2
chmod +x "$work/no-checkpoint"
: > "$STUB_REQUEUE_LOG"
BATON="$work/no-checkpoint" STUB_STARTED="$work/started" \
  bash deploy/slurm/train.sbatch "${args[@]}" > "$work/third.log" 2>&1 &
batch=$!
for _ in $(seq 1 1200); do
  [ -e "$work/started.0" ] && [ -e "$work/started.1" ] && break
  sleep 0.05
done
kill -TERM "$batch"
wait "$batch"
code=$?
[ "$code" != 0 ] || fail "the batch script exited 0 though no checkpoint was written"
grep -q "requeue" "$STUB_REQUEUE_LOG" && fail "the job was requeued without a new checkpoint"
grep -q "no new checkpoint was written" "$work/third.log" ||
  fail "the script did not say why it failed: $(tail -n 5 "$work/third.log")"
echo "no checkpoint after SIGTERM: not requeued, exit $code"
