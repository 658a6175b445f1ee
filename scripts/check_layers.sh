#!/usr/bin/env bash
# The layering (README, "Layout"): each folder may include its own headers and
# those of the folders listed beside it, all of them lower; nothing includes upwards. Run by
# ctest (the `layering` test, label lint): an include of a higher layer fails the suite, naming
# the file, the line and the two layers.
#
#   scripts/check_layers.sh [ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# Lowest first. A folder's list is every folder it may include (not only its direct neighbours),
# so that the table reads as the full picture. bench/, tests/ and every test source (*_test.cc,
# *_test_util.h: a checkpoint round trip saves a real stage model) sit above everything.
declare -A allowed=(
  [core]=""
  [proto]=""
  [data]="core"
  [scheduler]="core"
  [config]="core data proto scheduler"
  [kernels]="core"
  [comm]="core kernels"
  [coordinator]="core proto comm"
  [model]="core kernels config"
  [checkpoint]="core kernels config model"
  [plan]="core proto config model scheduler"
  [worker]="core data config kernels model checkpoint scheduler comm plan"
  [planner]="core data config kernels model checkpoint scheduler comm plan worker"
  [job]="core data config kernels model checkpoint scheduler comm coordinator plan worker planner"
  [launcher]="core data config kernels model checkpoint scheduler comm coordinator plan worker planner job"
)

status=0
while IFS= read -r file; do
  layer=${file%%/*}
  [[ $file == *_test.cc || $file == *_test_util.h ]] && continue
  [[ -v "allowed[$layer]" ]] || continue
  while IFS=: read -r line target; do
    [[ $target == "$layer" ]] && continue
    [[ " ${allowed[$layer]} " == *" $target "* ]] && continue
    if [[ ! -v "allowed[$target]" ]]; then
      continue  # not a layer of ours (a generated header, a third-party path)
    fi
    echo "$file:$line: $layer includes $target/, which is not below it (scripts/check_layers.sh)"
    status=1
  done < <(grep -n '^#include "' "$file" | sed -E 's|^([0-9]+):#include "([a-z_]+)/.*|\1:\2|;t;d')
done < <(git ls-files --cached --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh')
exit "$status"
