#!/bin/bash
# Baton under Open MPI on one node: every rank runs the same command, rank 0 hosts the
# coordinator and tells the others its address through MPI.
#
#   deploy/mpirun.sh 4 configs/gpt-tiny.yaml [baton run options...]
set -euo pipefail

processes=${1:?usage: mpirun.sh PROCESSES CONFIG [options...]}
config=${2:?usage: mpirun.sh PROCESSES CONFIG [options...]}
shift 2

root_flags=()
if [ "$(id -u)" -eq 0 ]; then
  root_flags=(--allow-run-as-root)
fi
exec mpirun "${root_flags[@]}" --oversubscribe -np "$processes" \
  "$(dirname "$0")/../build/baton" run "$config" --set parallel.stages="$processes" "$@"
