#!/usr/bin/env bash
# Log-rule evaluation alone (figures, not a test): 10 rules, 100-byte lines, one core. Builds the
# benchmark with the release profile (the PID 1's: opt-level "z", fat LTO) and prints lines/s
# and bytes/s; then, beside it, the peer: the HyperPod elastic agent's own evaluation (1.1.3's
# monitor loop, installed by scripts/setup-hyperpod.sh) on the same lines and rules
# (scripts/bench/log_rules_agent.py). Usage: bash scripts/bench-log-rules.sh [AGENT_PASSES]
# (default 10: the agent reads each log of 4,096 lines that many times).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p rankvisor-core --example log_rules_bench
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "build: cargo build --release -p rankvisor-core --example log_rules_bench (profile release: opt-level z, fat LTO), $(rustc --version)"
agent_passes=${1:-10}
agent_src=$(bash scripts/setup-hyperpod.sh | tail -n 1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$target_dir/release/examples/log_rules_bench" --write-lines "$work"
echo "the peer: hyperpod-elastic-agent 1.1.3's monitor loop ($agent_src), $(python3 --version), the same 10 rules and lines:"
python3 scripts/bench/log_rules_agent.py "$agent_src" scripts/bench/log-rules-10.json "$agent_passes" "$work/mixed.log" "$work/relay.log"
