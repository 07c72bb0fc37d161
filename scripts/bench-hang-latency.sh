#!/usr/bin/env bash
# Hang detection latency of --log-rules (figures, not a test): a child prints one matching line,
# then nothing; a recurring rule of N s must stop it between N and N + 1 s after that line. The
# child stamps the time right after its line and again when SIGTERM reaches it; the figure is
# (TERM - line) - N. Usage: bash scripts/bench-hang-latency.sh [N...]   (default: 1 2 5)
# RANKVISOR_BIN picks the binary (default: target/debug/rankvisor, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${RANKVISOR_BIN:-target/debug/rankvisor}
[ -x "$bin" ] || cargo build -q --bin rankvisor
echo "binary: $bin ($(rustc --version))"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ $# -gt 0 ] || set -- 1 2 5
for n in "$@"; do
  for run in 1 2 3; do
    printf '[{"name":"Step","logPattern":".*step.*","expectedRecurringFrequencyInSeconds":%s}]' "$n" > "$work/rules.json"
    rm -f "$work/t0" "$work/t1"
    "$bin" --node-health off --http-addr off --restart-policy Never --log-rules "$work/rules.json" -- \
      sh -c 'trap "date +%s%N > $0/t1; exit 0" TERM; echo step; date +%s%N > $0/t0; while :; do sleep 0.005; done' "$work" \
      > /dev/null 2>&1 || true
    t0=$(cat "$work/t0"); t1=$(cat "$work/t1")
    awk -v n="$n" -v t0="$t0" -v t1="$t1" -v run="$run" \
      'BEGIN { d = (t1 - t0) / 1e9; printf "N=%ss run %d: stopped %.3f s after the line (%.3f s past N)\n", n, run, d, d - n }'
  done
done
