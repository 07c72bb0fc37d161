#!/usr/bin/env bash
# Regenerates examples/*.svg: the timeline (`rankvisor dry-run --timeline`) of each of seed 000's
# five scenarios, plus one with an injected fault, each from a real dry run. Checks each run ends
# with the exit status its scenario expects.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --quiet --bin rankvisor --bin rankvisor-dry-run
bin="$CARGO_TARGET_DIR/debug/rankvisor"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

# name | expected exit | dry-run arguments
scenarios=(
  "pytorchjob|0|--timeout 60s examples/pytorchjob.yaml"
  "pytorchjob-worker-fails|0|--timeout 60s examples/pytorchjob-worker-fails.yaml"
  "pytorchjob-all-workers-fail|1|--timeout 60s examples/pytorchjob-all-workers-fail.yaml"
  "pytorchjob-master-fails|1|--timeout 60s examples/pytorchjob-master-fails.yaml"
  "pytorchjob-gang|1|--timeout 4s --queue-capability cpu=2 examples/pytorchjob-gang.yaml"
  "pytorchjob-injected-faults|0|--timeout 60s --inject fail:worker-1@1500ms --inject delete:worker-2@2s examples/pytorchjob.yaml"
)
for s in "${scenarios[@]}"; do
  IFS='|' read -r name want args <<<"$s"
  out="examples/$name.svg"
  set +e
  # shellcheck disable=SC2086 # the arguments are words on purpose
  "$bin" dry-run --master-port 0 --logs "$logs/$name" --timeline "$out" $args >"$logs/$name.watch" 2>"$logs/$name.err"
  code=$?
  set -e
  if [ "$code" != "$want" ]; then
    echo "timelines: $name exited $code, expected $want" >&2
    cat "$logs/$name.err" >&2
    exit 1
  fi
  echo "timelines: $out ($(wc -c <"$out") bytes, exit $code)"
done
