#!/usr/bin/env bash
# Hang detection latency of --log-rules (figures, not a test): a child prints one matching line,
# then nothing; a recurring rule of N s must stop it between N and N + 1 s after that line. The
# child (python3: one process, CLOCK_MONOTONIC) stamps the time just before it writes its line and
# again in its SIGTERM handler; the figure is (TERM - line) - N, which can only overstate the delay
# (rankvisor reads the line after the write starts, and the handler runs after the signal
# arrives), so it must be > 0 however loaded the machine.
# Then the peer: the HyperPod elastic agent's own log monitoring (1.1.3,
# installed by scripts/setup-hyperpod.sh) with the same rule, from the line to its HANGING verdict
# (scripts/bench/hang_latency_agent.py). Usage: bash scripts/bench-hang-latency.sh [N...]
# (default: 1 2 5)
# RANKVISOR_BIN picks the binary (default: target/debug/rankvisor, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${RANKVISOR_BIN:-target/debug/rankvisor}
[ -x "$bin" ] || cargo build -q --bin rankvisor
echo "binary: $bin ($(rustc --version))"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ $# -gt 0 ] || set -- 1 2 5
# The child: the time before its line in t0, the time SIGTERM reached it in t1 (nanoseconds).
child='
import os, signal, sys, time
out = sys.argv[1]
def term(*_):
    with open(out + "/t1", "w") as f:
        f.write(str(time.monotonic_ns()))
    os._exit(0)
signal.signal(signal.SIGTERM, term)
t0 = time.monotonic_ns()
os.write(1, b"step\n")
with open(out + "/t0", "w") as f:
    f.write(str(t0))
while True:
    time.sleep(60)
'
for n in "$@"; do
  for run in 1 2 3; do
    printf '[{"name":"Step","logPattern":".*step.*","expectedRecurringFrequencyInSeconds":%s}]' "$n" > "$work/rules.json"
    rm -f "$work/t0" "$work/t1"
    "$bin" --node-health off --http-addr off --restart-policy Never --log-rules "$work/rules.json" -- \
      python3 -c "$child" "$work" \
      > /dev/null 2>&1 || true
    t0=$(cat "$work/t0"); t1=$(cat "$work/t1")
    awk -v n="$n" -v t0="$t0" -v t1="$t1" -v run="$run" \
      'BEGIN { d = (t1 - t0) / 1e9; printf "N=%ss run %d: stopped %.3f s after the line (%.3f s past N)\n", n, run, d, d - n }'
  done
done
agent_src=$(bash scripts/setup-hyperpod.sh | tail -n 1)
echo "the peer: hyperpod-elastic-agent 1.1.3's log monitoring ($agent_src), $(python3 --version), the same rule, from the line to its HANGING verdict:"
python3 scripts/bench/hang_latency_agent.py "$agent_src" "$@"
