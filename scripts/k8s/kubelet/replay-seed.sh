#!/usr/bin/env bash
# Seed 000's five scenarios (examples/*.yaml), each run by `rankvisor dry-run` and as pods on a real
# kubelet (tests/heavy/real_node.rs's opt-in scenario seed_replay), printing both timelines: every pod's
# STATUS/RESTARTS as `kubectl get pods` shows them, with ms since the job's creation. A figure, not
# a test: nothing about the timings is asserted. About 4 minutes (the cluster's start included).
# Usage: bash scripts/k8s/kubelet/replay-seed.sh   (needs root and a Docker engine)
set -euo pipefail
cd "$(dirname "$0")/../../.."
RANKVISOR_TEST_KUBE_APISERVER=$(bash scripts/k8s/build-apiserver.sh | tail -n 1)
RANKVISOR_TEST_KUBE_NODE_BIN=$(bash scripts/k8s/kubelet/build.sh | tail -n 1)
RANKVISOR_TEST_IMAGE=${RANKVISOR_TEST_IMAGE:-$(bash images/build.sh | tail -n 1)}
export RANKVISOR_TEST_KUBE_APISERVER RANKVISOR_TEST_KUBE_NODE_BIN RANKVISOR_TEST_IMAGE
RANKVISOR_REAL_NODE_ONLY=seed_replay cargo test --test heavy -- real_node:: --nocapture 2>&1 \
  | grep -E '^(---|  (dry-run|kubelet) |ok |FAILED|cluster:|check-clean|test result)'
