#!/usr/bin/env bash
# The main job on a fresh machine: build rankvisor and dry-run seed 000's PyTorchJob.
# Usage: bash scripts/main.sh [extra dry-run options]   e.g. --output json, --inject fail:worker-0@2s
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
exec target/release/rankvisor dry-run "$@" examples/pytorchjob.yaml
