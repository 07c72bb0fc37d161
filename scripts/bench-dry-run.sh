#!/usr/bin/env bash
# How much rankvisor's dry run adds to the job itself: the normal scenario (every replica runs
# `sleep 1`, then the job succeeds) with 1, 4, 16 and 64 replicas. Prints a table; asserts nothing.
#
#   scripts/bench-dry-run.sh            # builds the debug binary if needed
#   RANKVISOR=path/to/rankvisor scripts/bench-dry-run.sh
#   REPLICAS="1 4 16 64 128" scripts/bench-dry-run.sh
set -euo pipefail

cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
bin="${RANKVISOR:-$target/debug/rankvisor}"
if [[ -z "${RANKVISOR:-}" ]]; then
    cargo build --quiet --bin rankvisor --bin rankvisor-dry-run
fi
sleep_s=1
replicas_list="${REPLICAS:-1 4 16 64}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A PyTorchJob with one master and n-1 workers, each sleeping $sleep_s.
manifest() {
    local n=$1 path=$2
    {
        cat <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: bench
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox
              command: ["sleep", "$sleep_s"]
YAML
        if ((n > 1)); then
            cat <<YAML
    Worker:
      replicas: $((n - 1))
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox
              command: ["sleep", "$sleep_s"]
YAML
        fi
    } >"$path"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The time_ms of the first JSON event that matches both patterns.
event_ms() {
    grep -F "$1" "$3" | grep -F "$2" | head -n 1 | grep -o '"time_ms":[0-9]*' | cut -d: -f2
}

printf '%-9s %-8s %-11s %-12s %-14s %s\n' REPLICAS EXIT WALL_MS OVERHEAD_MS JOB_RUNNING_MS ALL_RUNNING_MS
for n in $replicas_list; do
    job="$work/job-$n.yaml"
    out="$work/out-$n.json"
    manifest "$n" "$job"
    start=$(now_ms)
    set +e
    "$bin" dry-run --output json --master-port 0 "$job" >"$out" 2>"$work/err-$n.txt"
    code=$?
    set -e
    wall=$(($(now_ms) - start))
    running=$(event_ms '"kind":"PyTorchJob"' '"state":"Running"' "$out")
    all_running=$(event_ms '"kind":"PodGroup"' "\"runnings\":$n," "$out")
    printf '%-9s %-8s %-11s %-12s %-14s %s\n' "$n" "$code" "$wall" "$((wall - sleep_s * 1000))" \
        "${running:--}" "${all_running:--}"
done
echo
echo "OVERHEAD_MS: wall time minus the ${sleep_s}s sleep (process start-up, supervision, teardown)."
echo "JOB_RUNNING_MS / ALL_RUNNING_MS: when the master / every replica was seen running (dry-run clock)."
