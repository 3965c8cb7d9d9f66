#!/usr/bin/env bash
# The lab and watch tests on a loaded machine (issue 39): RUNS times in a row, each by
# `make test-suite` (its WORKERS, then the solo ones alone), with SPIN processes
# spinning on the cores the whole time. Stops at the first failing run. The spinners are
# bounded (timeout) and killed on exit. Each run's whole output stays in $LOGS (/tmp).
#
#   bash benchmarks/loaded_suite.sh [RUNS=3] [SPIN=2] > benchmarks/results/loaded_suite.log
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
spin=${2:-2}
paths="tests/lab tests/watch"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
for _ in $(seq "$spin"); do
    timeout 3600 sh -c 'while :; do :; done' &
    pids+=($!)
done
echo "$(date -u '+%F %T') UTC: $paths, $runs runs, $spin spinning processes, $(nproc) cores"
for run in $(seq "$runs"); do
    start=$(date +%s)
    # each run's whole output kept (LOGS, default /tmp): a failure under load is read there
    log="${LOGS:-/tmp}/loaded_suite_run$run.log"
    make -s test-suite TESTS="$paths" > "$log" 2>&1
    code=$?
    grep -E "^(FAILED|ERROR) |^[0-9]+ (passed|failed)|^make: " "$log"
    [ "$code" -eq 0 ] || { echo "run $run: FAILED (rc $code; whole output: $log)"; exit 1; }
    echo "run $run: passed in $(( $(date +%s) - start )) s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
