#!/usr/bin/env bash
# Log-rule evaluation alone (figures, not a test): 10 rules, 100-byte lines, one core. Builds the
# benchmark with the release profile (the PID 1's: opt-level "z", fat LTO) and prints lines/s
# and bytes/s. Usage: bash scripts/bench-log-rules.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p rankvisor-core --example log_rules_bench
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "build: cargo build --release -p rankvisor-core --example log_rules_bench (profile release: opt-level z, fat LTO), $(rustc --version)"
"$target_dir/release/examples/log_rules_bench"
