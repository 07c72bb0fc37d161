#!/usr/bin/env bash
# The stdout relay with log rules (figures, not a test): a child writes SIZE bytes of 100-byte
# lines, once straight into a pipe and once through rankvisor with 10 log rules, the same reader
# draining the pipe; prints the throughput of both, their ratio, and rankvisor's peak RSS with the
# rules and without them (its stdout then untouched). Usage: bash scripts/bench-log-relay.sh [SIZE]
# (default 1073741824: 1 GiB). RANKVISOR_BIN picks the binary (default: the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1073741824}
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin=${RANKVISOR_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -q -p rankvisor --bin rankvisor
  bin=$target_dir/release/rankvisor
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The benchmarks' 10 rules, in the AWS examples' style (also the evaluation benchmark's).
rules=scripts/bench/log-rules-10.json
# A training log line padded to 99 characters (plus the newline: 100 bytes).
line=$(printf '%-99s' "[default0] Train Epoch: 1 [640/60000 (1%)] training_loss_step 1.9001 'samples/sec': 812.5")
child=(sh -c "yes '$line' | head -c $size")
now() { date +%s.%N; }
# The reader: counts what it drains, so a short read is seen.
reader() { wc -c; }
# rankvisor's peak RSS (VmHWM), sampled until it exits; the pipe's reader in the foreground.
run_rankvisor() {
  local out=$1; shift
  rm -f "$work/fifo"; mkfifo "$work/fifo"
  reader <"$work/fifo" >"$out" &
  "$bin" --http-addr off --rendezvous off --node-health off --log-level warn "$@" -- "${child[@]}" >"$work/fifo" &
  local pid=$!
  local peak=0
  while kill -0 "$pid" 2>/dev/null; do
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${hwm:-0}" -gt "$peak" ] && peak=$hwm
    sleep 0.05
  done
  wait
  echo "$peak"
}
t0=$(now); "${child[@]}" | reader >"$work/direct"; t1=$(now)
direct=$(awk -v b="$(cat "$work/direct")" -v a="$t0" -v z="$t1" 'BEGIN{printf "%.0f", b/(z-a)/1048576}')
t0=$(now); peak_rules=$(run_rankvisor "$work/rules" --log-rules "$rules"); t1=$(now)
relayed=$(awk -v b="$(cat "$work/rules")" -v a="$t0" -v z="$t1" 'BEGIN{printf "%.0f", b/(z-a)/1048576}')
peak_plain=$(run_rankvisor "$work/plain")
[ "$(cat "$work/direct")" = "$size" ] && [ "$(cat "$work/rules")" = "$size" ] || { echo "a reader saw a short stream: direct $(cat "$work/direct"), through rankvisor $(cat "$work/rules")" >&2; exit 1; }
echo "build: $bin ($(stat -c %s "$bin") bytes), $(rustc --version); load $(cut -d' ' -f1 /proc/loadavg) at the end"
echo "direct: $direct MiB/s; through rankvisor with 10 rules: $relayed MiB/s; ratio $(awk -v a="$relayed" -v b="$direct" 'BEGIN{printf "%.2f", a/b}') (target >= 0.90)"
echo "rankvisor peak RSS: $peak_rules KiB with the rules, $peak_plain KiB without (difference $((peak_rules - peak_plain)) KiB; target <= 4096)"
