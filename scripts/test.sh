#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need, then the whole suite.
# Usage: bash scripts/test.sh [extra nextest/cargo-test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v setsid >/dev/null 2>&1 || need_apt+=(util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${need_apt[*]}"
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

# The Kubernetes node-health tests start real kube-apiservers: build it once (cached outside the repo).
RANKVISOR_TEST_KUBE_APISERVER=$(bash scripts/k8s/build-apiserver.sh | tail -n 1)
export RANKVISOR_TEST_KUBE_APISERVER

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast "$@"
else
  echo "scripts/test.sh: cargo-nextest not found, using cargo test"
  cargo test --no-fail-fast "$@"
fi
