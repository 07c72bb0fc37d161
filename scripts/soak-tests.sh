#!/usr/bin/env bash
# Runs the whole suite N times in a row on a loaded machine and prints each run's pass/fail counts:
# a test that passes only on an idle machine is flaky, and this is where it shows.
#
# Usage: bash scripts/soak-tests.sh [N] [-- nextest arguments]
#   N                 how many runs (default 5, or $SOAK_RUNS)
#   -- ARGS           passed to every run (through scripts/test.sh to `cargo nextest run`),
#                     e.g. `-- -E 'test(/^(signals|hang)::/)'` for a subset
# Environment: SOAK_STRESS_CPU (stress-ng CPU workers, default 2; 0 for no load),
#              SOAK_LOG_DIR (default target/soak).
#
# Each run is `bash scripts/test.sh ARGS` (the set-up steps there are cached, so they are cheap
# after the first run), under `stress-ng --cpu 2` started here (installed from Debian when missing)
# and stopped at the end. Exits 0 only when every run passed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${SOAK_RUNS:-5}
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  runs=$1
  shift
fi
if [ $# -gt 0 ] && [ "$1" = "--" ]; then
  shift
fi
case $runs in
  '' | *[!0-9]* | 0)
    echo "scripts/soak-tests.sh: the number of runs must be a positive integer, got '$runs'" >&2
    exit 64
    ;;
esac
cpu=${SOAK_STRESS_CPU:-2}
case $cpu in
  '' | *[!0-9]*)
    echo "scripts/soak-tests.sh: SOAK_STRESS_CPU must be a number of CPU workers, got '$cpu'" >&2
    exit 64
    ;;
esac
log_dir=${SOAK_LOG_DIR:-target/soak}
mkdir -p "$log_dir"

stress_pid=
stop_load() {
  if [ -n "$stress_pid" ] && kill -0 "$stress_pid" 2>/dev/null; then
    # stress-ng's parent stops its own workers on TERM.
    kill -TERM "$stress_pid" 2>/dev/null || true
    wait "$stress_pid" 2>/dev/null || true
  fi
  stress_pid=
}
trap stop_load EXIT
# A soak stopped from outside says so (bash runs these once the current run's test.sh returns).
trap 'echo "scripts/soak-tests.sh: stopped by SIGINT" >&2; stop_load; exit 130' INT
trap 'echo "scripts/soak-tests.sh: stopped by SIGTERM" >&2; stop_load; exit 143' TERM
trap 'echo "scripts/soak-tests.sh: stopped by SIGHUP" >&2; stop_load; exit 129' HUP

if [ "$cpu" -gt 0 ]; then
  if ! command -v stress-ng >/dev/null 2>&1; then
    echo "scripts/soak-tests.sh: installing stress-ng (Debian)"
    apt-get update -qq && apt-get install -y -qq stress-ng >/dev/null
  fi
  # The timeout is only a backstop should this script be killed without running its trap.
  stress-ng --cpu "$cpu" --timeout 6h --quiet &
  stress_pid=$!
  echo "scripts/soak-tests.sh: load: stress-ng --cpu $cpu (pid $stress_pid)"
else
  echo "scripts/soak-tests.sh: no extra load (SOAK_STRESS_CPU=0)"
fi

# "N passed", "N failed", ... summed over nextest's summary lines (scripts/test.sh runs nextest
# twice: the workspace's suite, then the trainer crate's tests); 0 when absent.
count() {
  local what=$1 lines=$2
  # grep finds nothing when there is none (e.g. no "N failed"): not an error under pipefail.
  { grep -oE "[0-9]+ $what" <<<"$lines" || true; } | awk '{ n += $1 } END { print n + 0 }'
}

summary=()
failed_runs=0
for i in $(seq 1 "$runs"); do
  log=$log_dir/run-$i.log
  t0=$SECONDS
  echo "scripts/soak-tests.sh: run $i/$runs (log: $log)"
  set +e
  bash scripts/test.sh "$@" >"$log" 2>&1
  rc=$?
  set -e
  took=$((SECONDS - t0))
  line=$(grep -E '^ *Summary \[' "$log" || true)
  if [ -z "$line" ]; then
    result="run $i: rc=$rc in ${took}s: no nextest summary (build or set-up failed?): see $log"
    failed_runs=$((failed_runs + 1))
  else
    passed=$(count passed "$line")
    failed=$(count failed "$line")
    timed_out=$(count "timed out" "$line")
    skipped=$(count skipped "$line")
    result="run $i: $passed passed, $failed failed, $timed_out timed out, $skipped skipped (rc=$rc) in ${took}s"
    if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$timed_out" -ne 0 ]; then
      failed_runs=$((failed_runs + 1))
    fi
  fi
  echo "scripts/soak-tests.sh: $result"
  # Which tests failed: nextest's closing list (FAIL / TIMEOUT / SIGSEGV ... lines after the summary).
  sed -n '/^ *Summary \[/,$p' "$log" | grep -E '^ +(FAIL|TIMEOUT|SIG[A-Z]+|ABORT|LEAK-FAIL) ' | sed 's/^ */    /' || true
  summary+=("$result")
done

stop_load
echo "scripts/soak-tests.sh: $runs run(s), $failed_runs with failures:"
printf '  %s\n' "${summary[@]}"
[ "$failed_runs" -eq 0 ]
