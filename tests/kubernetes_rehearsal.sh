#!/usr/bin/env bash
# ctest kubernetes_rehearsal: deploy/kubernetes/baton-job.yaml as Kubernetes would run it, its pods
# stood in for by local processes. First the manifest's wiring is checked (what a cluster would
# only reveal by hanging): one rank per completion index, the world size said three times alike,
# rank 0's pod name (<job>-0.<subdomain>) as MASTER_ADDR through a headless Service of the Job's
# pods on MASTER_PORT, RANK from the completion index. Then every pod's process is started with
# the environment its pod would see (MASTER_ADDR is 127.0.0.1 here: no cluster DNS) and the
# manifest's own arguments, on a few steps, and must end with the parameter checksum of the local
# launcher's run of the same arguments.
#
#   tests/kubernetes_rehearsal.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: kubernetes_rehearsal.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/kubernetes-rehearsal.XXXXXX") || exit 1
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
checksum() { sed -n 's/.*param checksum \([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

# 1. The manifest, read with nothing but Python's standard library: its two documents are plain
# enough (block mappings, the args a JSON list) for a reader of that subset, which refuses
# anything else rather than guess.
python3 - deploy/kubernetes/baton-job.yaml > "$work/pods.env" <<'PY' || fail "the manifest's wiring"
import json, re, sys

text = open(sys.argv[1]).read()
def one(pattern, what):
    found = re.findall(pattern, text, re.M)
    if len(found) != 1:
        sys.exit(f"{what}: {len(found)} matches of {pattern!r}")
    return found[0]

def env(name):
    block = re.search(rf"- name: {name}\n(.*?)(?=\n\s+- name: |\n\s+ports:)", text, re.S)
    if not block:
        sys.exit(f"no env {name}")
    value = re.search(r'value: "([^"]*)"', block.group(1))
    return value.group(1) if value else block.group(1)

job = one(r"^kind: Job\nmetadata:\n  name: (\S+)", "the Job's name")
service = one(r"^kind: Service\nmetadata:\n  name: (\S+)", "the Service's name")
completions = int(one(r"^  completions: (\d+)", "completions"))
parallelism = int(one(r"^  parallelism: (\d+)", "parallelism"))
world = int(env("WORLD_SIZE"))
if not (completions == parallelism == world):
    sys.exit(f"completions {completions}, parallelism {parallelism} and WORLD_SIZE {world} differ")
if one(r"^  completionMode: (\S+)", "completionMode") != "Indexed":
    sys.exit("the Job must be Indexed: RANK is the completion index")
if "batch.kubernetes.io/job-completion-index" not in env("RANK"):
    sys.exit("RANK must come from the pod's completion index")
subdomain = one(r"^      subdomain: (\S+)", "the pods' subdomain")
if subdomain != service:
    sys.exit(f"the pods' subdomain {subdomain} is not the Service {service}: no DNS name")
if one(r"^  clusterIP: (\S+)", "clusterIP") != "None":
    sys.exit("the Service must be headless (clusterIP: None) to name each pod")
if one(r"^    job-name: (\S+)", "the Service's selector") != job:
    sys.exit("the Service must select the Job's pods (job-name)")
if env("MASTER_ADDR") != f"{job}-0.{subdomain}":
    sys.exit(f"MASTER_ADDR {env('MASTER_ADDR')} is not rank 0's pod, {job}-0.{subdomain}")
port = env("MASTER_PORT")
if one(r"^      port: (\d+)", "the Service's port") != port:
    sys.exit(f"the Service's port is not MASTER_PORT {port}")
args = json.loads(one(r"^          args: (\[.*\])$", "the container's args"))
if args[:1] != ["run"] or "--launcher" not in args or args[args.index("--launcher") + 1] != "torchrun":
    sys.exit(f"the pods must run `baton run ... --launcher torchrun`, not {args}")
print(world)
print(env("LOCAL_RANK"))
print("\n".join(args))
PY
# Line 1 the world size, line 2 LOCAL_RANK, then the container's args, one per line.
mapfile -t lines < "$work/pods.env"
world=${lines[0]} local_rank=${lines[1]} args=("${lines[@]:2}")
# The manifest's run on a few steps, writing here: later --set values win.
args+=(--set train.steps=3 --set train.log_every=1 --set "output.dir=$work/pods")
echo "manifest: $world pods, baton ${args[*]}"

# 2. Every pod's process, with the environment its pod would see.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for ((rank = 0; rank < world; ++rank)); do
  env -u BATON_COORDINATOR -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID \
    RANK="$rank" WORLD_SIZE="$world" LOCAL_RANK="$local_rank" MASTER_ADDR=127.0.0.1 \
    MASTER_PORT="$port" \
    BATON_TOKEN=rehearsal "$build/baton" "${args[@]}" > "$work/pod-$rank.log" 2>&1 &
  pids+=($!)
done
for ((rank = 0; rank < world; ++rank)); do
  wait "${pids[rank]}" || fail "pod $rank exited $?: $(tail -n 20 "$work/pod-$rank.log")"
done
pids=()

# 3. The local launcher's run of the same arguments (without the pods' launcher).
local_args=()
for ((i = 0; i < ${#args[@]}; ++i)); do
  if [ "${args[i]}" = --launcher ]; then
    i=$((i + 1))
    continue
  fi
  local_args+=("${args[i]}")
done
"$build/baton" "${local_args[@]}" --set "output.dir=$work/local" > "$work/local.log" 2>&1 ||
  fail "the local run failed: $(tail -n 20 "$work/local.log")"
pods=$(checksum "$work/pod-0.log")
expected=$(checksum "$work/local.log")
if [ -z "$expected" ] || [ "$pods" != "$expected" ]; then
  fail "the pods' checksum '$pods', the local launcher's '$expected'"
fi
echo "$world pods ended with the local launcher's checksum $pods"
