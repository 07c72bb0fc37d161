#!/usr/bin/env bash
# The chaos soak (tests/heavy/chaos.rs, chaos_soak_two_minutes; tests/heavy/chaos/soak.rs has the faults and
# the checks), for as long as you like: builds the lean rankvisor and the dry run as scripts/test.sh
# does, then runs that test with its duration and seed.
# Usage: bash scripts/chaos.sh [--duration SECONDS (default 600, at least 60)] [--seed N (default: random)]
set -euo pipefail
cd "$(dirname "$0")/.."
duration=600
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "scripts/chaos.sh: unknown argument $1: expected --duration SECONDS or --seed N" >&2; exit 2 ;;
  esac
done
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --quiet -p rankvisor --bin rankvisor
cargo build --quiet -p rankvisor-dryrun --bin rankvisor-dry-run
mkdir -p "$target_dir/pid1"
cp "$target_dir/debug/rankvisor" "$target_dir/debug/rankvisor-dry-run" "$target_dir/pid1/"
echo "scripts/chaos.sh: ${duration} s, seed $seed"
# cargo test rather than nextest: no slow-timeout cuts a long soak short.
RANKVISOR_TEST_BIN=$target_dir/pid1/rankvisor RANKVISOR_TEST_CHAOS_DURATION=$duration RANKVISOR_TEST_CHAOS_SEED=$seed \
  exec cargo test --quiet -p rankvisor --test heavy -- --exact chaos::chaos_soak_two_minutes --nocapture
