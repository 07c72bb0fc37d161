#!/usr/bin/env bash
# The chaos soak (issue 15, item 6): builds rankvisor, then runs scripts/chaos.py against it.
# Usage: bash scripts/chaos.sh [--duration 600] [--seed N] [--only KINDS] [...]
# (every argument goes to scripts/chaos.py; see `python3 scripts/chaos.py --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin rankvisor --bin rankvisor-dry-run
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
exec python3 scripts/chaos.py --binary "$target_dir/debug/rankvisor" "$@"
