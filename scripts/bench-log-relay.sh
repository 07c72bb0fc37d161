#!/usr/bin/env bash
# The stdout relay with log rules (figures, not a test): a child writes SIZE bytes of 100-byte
# lines, once straight into a pipe and once through rankvisor with 10 log rules, the same reader
# draining the pipe; prints the throughput of both, their ratio, and rankvisor's peak RSS with the
# rules and without them (its stdout then untouched); and, to tell the relay's copy from the
# rules' evaluation, the throughput through rankvisor with one rule whose text no line has (each
# read copied and searched once, no line evaluated); and the peer: `cat` put in the same pipe,
# whose CPU seconds per GiB the relay's are compared with (the pipeline's CPU less the direct
# pipeline's is the middle process's own; two shared cores distort throughput ratios, not CPU
# seconds). Two rounds, the pipelines interleaved, the
# better of each; the RSS is sampled in runs of its own (the sampler's processes would share the
# two cores with the timed ones). Usage: bash scripts/bench-log-relay.sh [SIZE]
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
# The reader: counts what it drains, so a short read is seen.
reader() { wc -c; }
common=(--http-addr off --rendezvous off --node-health off --log-level warn)
# One rule whose text is in no line: each read is copied and searched once, no line is evaluated.
echo '[{"name": "Absent", "logPattern": ".*No such text.*", "faultOnMatch": true}]' >"$work/absent.json"
# One run of a pipeline into the reader, its count in $work/NAME: its throughput (MiB/s) and the
# CPU time of every process in it (user + system, in seconds: bash's `time`, from wait4), with
# nothing else running beside it (the RSS is sampled in runs of its own).
timed() {
  local name=$1; shift
  local TIMEFORMAT='%R %U %S' wall user sys
  { time "$@" 2>"$work/$name.err" | reader >"$work/$name"; } 2>"$work/$name.time"
  [ "$(cat "$work/$name")" = "$size" ] || { echo "a reader saw a short stream ($name): $(cat "$work/$name") of $size bytes" >&2; exit 1; }
  read -r wall user sys <"$work/$name.time"
  awk -v b="$size" -v w="$wall" -v u="$user" -v s="$sys" 'BEGIN{printf "%.0f/%.2f", b/w/1048576, u+s}'
}
# rankvisor's peak RSS (VmHWM) in KiB and its own CPU time (its threads', not the child's: user
# and system, in seconds), its stdout a pipe to the reader, sampled every 50 ms until it exits
# (the CPU time as of the last sample).
sampled() {
  rm -f "$work/fifo"; mkfifo "$work/fifo"
  reader <"$work/fifo" >/dev/null &
  "$bin" "${common[@]}" "$@" -- "${child[@]}" >"$work/fifo" &
  local pid=$!
  local peak=0 cpu="0 0" hwm st
  while kill -0 "$pid" 2>/dev/null; do
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${hwm:-0}" -gt "$peak" ] && peak=$hwm
    # utime and stime (fields 14 and 15, in clock ticks), after the command name in parentheses.
    st=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f %.2f", $12/hz, $13/hz}') && [ -n "$st" ] && cpu=$st
    sleep 0.05
  done
  wait
  echo "$peak $cpu"
}
# Two rounds, the three pipelines interleaved; the faster run of each (MiB/s/CPU seconds).
best() { tr ' ' '\n' | sort -t/ -k1,1n | tail -1; }
d=() r=() c=() k=()
for _ in 1 2; do
  d+=("$(timed direct "${child[@]}")")
  k+=("$(timed cat sh -c "yes '$line' | head -c $size | cat")")
  r+=("$(timed rules "$bin" "${common[@]}" --log-rules "$rules" -- "${child[@]}")")
  c+=("$(timed copy "$bin" "${common[@]}" --log-rules "$work/absent.json" -- "${child[@]}")")
done
IFS=/ read -r direct direct_cpu < <(echo "${d[*]}" | best)
IFS=/ read -r relayed relayed_cpu < <(echo "${r[*]}" | best)
IFS=/ read -r copied copied_cpu < <(echo "${c[*]}" | best)
IFS=/ read -r catted cat_cpu < <(echo "${k[*]}" | best)
# For CPU seconds, the least of the runs (the fastest run by throughput need not be the cheapest).
mincpu() { tr ' ' '\n' | cut -d/ -f2 | sort -n | head -1; }
direct_cpu=$(echo "${d[*]}" | mincpu) cat_cpu=$(echo "${k[*]}" | mincpu) relayed_cpu=$(echo "${r[*]}" | mincpu)
read -r peak_rules cpu_user cpu_sys < <(sampled --log-rules "$rules")
read -r _ copy_user copy_sys < <(sampled --log-rules "$work/absent.json")
read -r peak_plain _ _ < <(sampled)
echo "build: $bin ($(stat -c %s "$bin") bytes), $(rustc --version); load $(cut -d' ' -f1 /proc/loadavg) at the end"
echo "runs (MiB/s/CPU s of the whole pipeline): direct ${d[*]}; through cat ${k[*]}; with 10 rules ${r[*]}; with 1 absent rule ${c[*]}"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo "direct: $direct MiB/s, $direct_cpu s of CPU for the pipeline; through rankvisor with 10 rules: $relayed MiB/s, $relayed_cpu s; ratio $(ratio "$relayed" "$direct")"
gib() { awk -v c="$1" -v b="$size" 'BEGIN{printf "%.2f", c*1073741824/b}'; }
own() { awk -v a="$1" -v b="$direct_cpu" 'BEGIN{printf "%.2f", a-b}'; }
echo "CPU s per GiB of the middle process (its pipeline's less the direct one's): cat $(gib "$(own "$cat_cpu")"); rankvisor with 10 rules $(gib "$(own "$relayed_cpu")"); ratio $(ratio "$(own "$relayed_cpu")" "$(own "$cat_cpu")") (target <= 1.5); whole pipelines: cat $(gib "$cat_cpu"), rankvisor $(gib "$relayed_cpu") s, ratio $(ratio "$relayed_cpu" "$cat_cpu")"
echo "through rankvisor with 1 rule whose text no line has (the copy): $copied MiB/s, $copied_cpu s; ratio $(ratio "$copied" "$direct")"
echo "rankvisor's own CPU for the $size bytes: with 10 rules ${cpu_user} s user, ${cpu_sys} s system; with 1 absent rule ${copy_user} s user, ${copy_sys} s system"
echo "rankvisor peak RSS: $peak_rules KiB with the rules, $peak_plain KiB without (difference $((peak_rules - peak_plain)) KiB; target <= 4096)"
