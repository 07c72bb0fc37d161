#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need, then the whole suite.
# Usage: bash scripts/test.sh [--quick] [extra nextest arguments]
#   --quick  the quick tier (.config/nextest.toml, profile `quick`): no torch, libtorch, kube-apiserver,
#            kubelet, Docker image, chromium, promtool, maturin, release or explicit-target build;
#            the tests that need them are not run.
# Both tiers run the lean PID 1 binary (`cargo build -p rankvisor`, alone: no other workspace
# member's features reach it), with the dry run and the stack reader beside it (RANKVISOR_TEST_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

need_apt=()
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v setsid >/dev/null 2>&1 || need_apt+=(util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${need_apt[*]}"
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

# The PID 1 binary under test, built on its own so that the dry run's and the tests' features
# (tokio's process and signal drivers, test-util) do not reach it, and the dry run beside it, both
# copied to <target dir>/pid1 (RANKVISOR_TEST_BIN); tests/pid1/lean_build.rs checks that it is lean.
t0=$SECONDS
mkdir -p "$target_dir/pid1"
if [ "$quick" = 1 ]; then
  # The quick tier builds the lean PID 1 in <target dir>/debug, where the test build that follows
  # finds every dependency built with the same features already compiled (it then relinks
  # <target dir>/debug/rankvisor with features unified: the copy is the lean one). The dry run
  # beside it is the test build's (crates/rankvisor-dryrun/tests builds it): no build of its own.
  cargo build -p rankvisor --bin rankvisor
  cp "$target_dir/debug/rankvisor" "$target_dir/pid1/"
  cargo nextest run --profile quick --no-run
  # The stack reader has no tests of its own that would build its binary: built here.
  cargo build -p rankvisor-stacks --bin rankvisor-stacks
  cp "$target_dir/debug/rankvisor-dry-run" "$target_dir/debug/rankvisor-stacks" "$target_dir/pid1/"
else
  # The full tier builds them with the host as an explicit --target, in <target dir>/<host>/debug,
  # apart from <target dir>/debug, where the test build's own rankvisor (features unified) is the
  # control of tests/pid1/lean_build.rs: tests/heavy/install.rs `cargo install`s these same builds from there.
  host=$(rustc -vV | sed -n 's/^host: //p')
  cargo build -p rankvisor --bin rankvisor --target "$host"
  cargo build -p rankvisor-dryrun --bin rankvisor-dry-run --target "$host"
  cargo build -p rankvisor-stacks --bin rankvisor-stacks --target "$host"
  cp "$target_dir/$host/debug/rankvisor" "$target_dir/$host/debug/rankvisor-dry-run" \
    "$target_dir/$host/debug/rankvisor-stacks" "$target_dir/pid1/"
fi
export RANKVISOR_TEST_BIN=$target_dir/pid1/rankvisor
echo "scripts/test.sh: lean rankvisor and rankvisor-dry-run: $((SECONDS - t0)) s"

if [ "$quick" = 1 ]; then
  t0=$SECONDS
  trap 'echo "scripts/test.sh: quick tier: $((SECONDS - t0)) s"' EXIT
  cargo nextest run --profile quick --no-fail-fast "$@"
  exit
fi

# The monitoring and job-page tests drive promtool and a headless chromium (Debian packages).
t0=$SECONDS
bash scripts/setup-views.sh
echo "scripts/test.sh: promtool and chromium: $((SECONDS - t0)) s"

# The training smoke tests (tests/heavy/training.rs) need libtorch 2.13.0 and a torch 2.13.0 venv, both
# cached outside the repository, and the tch trainer example built with the same LIBTORCH.
t0=$SECONDS
torch_env=$(bash scripts/setup-torch.sh)
eval "$torch_env"
echo "scripts/test.sh: torch set-up: $((SECONDS - t0)) s"
t0=$SECONDS
cargo build -p rankvisor-trainer --example smoke_train
export RANKVISOR_SMOKE_TRAIN=$target_dir/debug/examples/smoke_train
echo "scripts/test.sh: smoke_train build: $((SECONDS - t0)) s"

# The log-rules differential test (tests/heavy/log_rules_agent.rs) replays logs through the real HyperPod
# elastic agent's log evaluator: its source, cached outside the repository.
t0=$SECONDS
RANKVISOR_TEST_HYPERPOD_AGENT=$(bash scripts/setup-hyperpod.sh | tail -n 1)
export RANKVISOR_TEST_HYPERPOD_AGENT
echo "scripts/test.sh: hyperpod-elastic-agent: $((SECONDS - t0)) s"

# The Kubernetes node-health tests start real kube-apiservers: build it once (cached outside the repo).
t0=$SECONDS
RANKVISOR_TEST_KUBE_APISERVER=$(bash scripts/k8s/build-apiserver.sh | tail -n 1)
export RANKVISOR_TEST_KUBE_APISERVER
echo "scripts/test.sh: kube-apiserver: $((SECONDS - t0)) s"

# tests/pid1/hyperpod_agent.rs validates /start bodies with the agent's own request models (pydantic, the
# version the agent pins; cached outside the repository) and re-encodes /status with its encoder.
t0=$SECONDS
RANKVISOR_TEST_PYDANTIC=$(bash scripts/setup-pydantic.sh | tail -n 1)
export RANKVISOR_TEST_PYDANTIC
echo "scripts/test.sh: pydantic: $((SECONDS - t0)) s"

# tests/heavy/real_node.rs runs pods on a real one-node cluster (scripts/k8s/kubelet/): kubelet, kubectl and
# the pause binary, built once from Debian's kubernetes source (cached outside the repo, like the API
# server). That test also needs the Docker engine and the image below, and fails without them.
t0=$SECONDS
RANKVISOR_TEST_KUBE_NODE_BIN=$(bash scripts/k8s/kubelet/build.sh | tail -n 1)
export RANKVISOR_TEST_KUBE_NODE_BIN
echo "scripts/test.sh: kubelet, kubectl: $((SECONDS - t0)) s"

# The lean PID 1 build with the test failpoints (never in an image): tests/pid1/config_errors.rs shows
# that the panic hook runs in the image's build (panic = "abort", std rebuilt without the symbolizer).
t0=$SECONDS
RANKVISOR_TEST_LEAN_FAILPOINTS_BIN=$(RANKVISOR_FEATURES=failpoints bash images/build.sh --binary-only | tail -n 1)
export RANKVISOR_TEST_LEAN_FAILPOINTS_BIN
echo "scripts/test.sh: lean build with failpoints: $((SECONDS - t0)) s"

# The wheel test (tests/heavy/install.rs) builds the Python wheel with maturin (PyPI, a venv cached
# outside the repo) from the lean static build, built here so that the test finds it up to date
# (with a Docker engine the image below is built from it too).
t0=$SECONDS
RANKVISOR_TEST_MATURIN=$(bash scripts/setup-maturin.sh | tail -n 1)
export RANKVISOR_TEST_MATURIN
bash images/build.sh --binary-only >/dev/null
echo "scripts/test.sh: maturin and the lean static build: $((SECONDS - t0)) s"

# The container tests (tests/heavy/container.rs) need a Docker engine and the image images/build.sh builds
# (FROM scratch, no registry); without an engine they fail, naming what is missing.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  t1=$SECONDS
  RANKVISOR_TEST_IMAGE=$(bash images/build.sh | tail -n 1)
  export RANKVISOR_TEST_IMAGE
  echo "scripts/test.sh: image $RANKVISOR_TEST_IMAGE built in $((SECONDS - t1)) s"
else
  echo "scripts/test.sh: no Docker engine answers \`docker info\`: tests/heavy/container.rs and tests/heavy/real_node.rs will fail"
fi

t0=$SECONDS
trap 'echo "scripts/test.sh: tests: $((SECONDS - t0)) s"' EXIT
cargo nextest run --no-fail-fast "$@"
# The trainer crate (needs libtorch, so not a default member) has unit tests of its own.
cargo nextest run -p rankvisor-trainer --no-fail-fast
