#!/usr/bin/env bash
# Runs the README's test command (./scripts/test.sh) while an unrelated CPU hog
# keeps every core busy: the suite must pass on a loaded machine (issue 29,
# docs/reliability.md "Testing under load"). The hog is one busy-looping process per core
# (`python3 -c 'while True: pass'`, at normal priority, as an unrelated job
# would be); it is killed when this script ends, however it ends.
#
#   scripts/test-under-load.sh                 # once, the whole suite
#   scripts/test-under-load.sh --runs 3        # three times in a row
#   scripts/test-under-load.sh --hogs 4 -- -m "not learning"   # pytest arguments after --
#
# Prints one line per run (its exit code and wall time) and a last line with
# how many passed; exits 0 only if every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=1
hogs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --runs=*) runs="${1#--runs=}"; shift ;;
    --hogs) hogs="$2"; shift 2 ;;
    --hogs=*) hogs="${1#--hogs=}"; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
case "$runs$hogs" in *[!0-9]*|'') echo "test-under-load: --runs and --hogs take whole numbers" >&2; exit 2 ;; esac

pids=()
run=""
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
}
# A signal to this script reaches the whole test run too, as Ctrl-C in a
# terminal would (pytest then tears its fixtures down: no process is left),
# then the hogs go. The run is a job in its own process group (set -m below):
# without job control a script's background job ignores SIGINT, and so did
# pytest, which ran on to its end (and the next run started).
# SIGTERM too goes on as SIGINT: pytest tears its fixtures down only on that.
stop() {
  if [ -n "$run" ]; then kill -INT -- "-$run" 2>/dev/null; wait "$run" 2>/dev/null; fi
  exit "$1"
}
trap cleanup EXIT
trap 'stop 130' INT
trap 'stop 143' TERM

for _ in $(seq "$hogs"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
echo "test-under-load: ${hogs} CPU hog(s) running (pids ${pids[*]}); ${runs} run(s) of ./scripts/test.sh $*"

passed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  set -m
  ./scripts/test.sh "$@" &
  run=$!
  set +m
  wait "$run"
  code=$?
  run=""
  echo "test-under-load: run ${i}/${runs}: exit ${code}, $(( $(date +%s) - start )) s"
  [ "$code" -eq 0 ] && passed=$((passed + 1))
done
echo "test-under-load: ${passed}/${runs} runs passed under ${hogs} CPU hog(s)"
[ "$passed" -eq "$runs" ]
