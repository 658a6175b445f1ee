# Sourced by tests/stress_jobs.sh and tests/repeat.sh: start_burners WORK_DIR starts one busy loop
# per core (the load a shared CI machine may have) and, at exit, stops them and removes WORK_DIR.
# shellcheck shell=bash
burners=()
start_burners() {
  local work=$1
  for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    burners+=($!)
  done
  # shellcheck disable=SC2064  # $work is expanded now, on purpose
  trap "kill \${burners[*]} 2>/dev/null; rm -rf '$work'" EXIT
}
