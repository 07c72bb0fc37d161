#!/usr/bin/env bash
# Long run of the property-based tests of every parser that reads outside input (durations, the
# labels file, rendezvous frames, HTTP requests, escaping): tests/pid1/parser_properties.rs with many
# cases. The normal suite runs the same properties with 32 cases each.
#   bash scripts/fuzz.sh            # 100000 cases per property
#   PROPTEST_CASES=5000 bash scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-100000}"
echo "fuzz: ${PROPTEST_CASES} cases per property"
exec cargo test --release --test pid1 -- parser_properties:: --test-threads="$(nproc)"
