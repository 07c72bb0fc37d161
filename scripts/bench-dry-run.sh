#!/usr/bin/env bash
# How much rankvisor's dry run adds to the job itself: the normal scenario (every replica runs
# `sleep 1`, then the job succeeds) with 1, 4, 16 and 64 replicas. Prints a table; asserts nothing.
#
#   scripts/bench-dry-run.sh            # builds the debug binary if needed
#   RANKVISOR=path/to/rankvisor scripts/bench-dry-run.sh
#   REPLICAS="1 4 16 64 128" scripts/bench-dry-run.sh
#
# Then a HyperPodPyTorchJob (each pod's container a real `rankvisor --agent hyperpod`, driven by
# the emulated operator over loopback HTTP) with HYPERPOD_REPLICAS pods (default "16 256"): the run
# to completion (every worker `sleep 1`), and one process-level restart of every agent (rank 0's
# worker exits 1 FAULT_AFTER seconds after its start, default 5: every agent stopped and started
# again with faultCount 1, timed by the operator from its decision to every agent RUNNING).
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

# A HyperPodPyTorchJob of n pods running `script`.
hyperpod_manifest() {
    local n=$1 script=$2 path=$3
    cat >"$path" <<YAML
apiVersion: sagemaker.amazonaws.com/v1
kind: HyperPodPyTorchJob
metadata:
  name: hpbench
spec:
  replicaSpecs:
    - name: pods
      replicas: $n
      template:
        spec:
          containers:
            - name: trainer
              image: busybox
              command: ["sh", "-c", "$script"]
  runPolicy:
    ttlSecondsAfterFinished: -1
YAML
}

fault_after="${FAULT_AFTER:-5}"
echo
printf '%-9s %-6s %-14s %-14s %-9s %-13s %-10s %-8s %s\n' PODS EXIT COMPLETE_MS RUNNING_MS PLR_EXIT FAULT_AT_MS DETECT_MS PLR_MS FIRST_RESTART
for n in ${HYPERPOD_REPLICAS:-16 256}; do
    job="$work/hp-$n.yaml"
    hyperpod_manifest "$n" "sleep $sleep_s" "$job"
    start=$(now_ms)
    set +e
    "$bin" dry-run --output json --master-port 0 --timeout 120s "$job" >"$work/hp-$n.json" 2>"$work/hp-err-$n.txt"
    code=$?
    set -e
    complete=$(($(now_ms) - start))
    running=$(event_ms '"kind":"HyperPodPyTorchJob"' '"state":"Running"' "$work/hp-$n.json")
    # Rank 0 fails once, FAULT_AFTER s into its first attempt; every attempt after sleeps 1 s.
    script="if [ \$JOB_RESTART_COUNT = 0 ]; then if [ \$PET_NODE_RANK = 0 ]; then sleep $fault_after; exit 1; fi; sleep 3600; fi; sleep $sleep_s"
    hyperpod_manifest "$n" "$script" "$job"
    set +e
    "$bin" dry-run --output json --master-port 0 --timeout 120s "$job" >"$work/hp-plr-$n.json" 2>"$work/hp-plr-err-$n.txt"
    plr_code=$?
    set -e
    fault_at=$(event_ms '"kind":"HyperPodPyTorchJob"' '"state":"Restarting"' "$work/hp-plr-$n.json")
    plr=$(grep -o 'remediated in [0-9]* milliseconds' "$work/hp-plr-err-$n.txt" | head -n 1 | grep -o '[0-9]*' || true)
    # The operator's fault detection: the worker's end to its decision (its GET /status read included).
    detect=$(grep -o 'fault detection ([^)]*) last [0-9]* ms' "$work/hp-plr-err-$n.txt" | head -n 1 | grep -o 'last [0-9]*' | grep -o '[0-9]*' || true)
    # What the first restart was (a PLR of WorkerCrash in pod 0 is the one measured).
    first=$(grep -o 'Restarting ([A-Z]*): fault of reason [A-Za-z_]* in [^:]*' "$work/hp-plr-err-$n.txt" | head -n 1 |
        sed -E 's/Restarting \(([A-Z]*)\): fault of reason ([A-Za-z_]*) in (.*)/\1 \2 \3/' || true)
    printf '%-9s %-6s %-14s %-14s %-9s %-13s %-10s %-8s %s\n' "$n" "$code" "$complete" "${running:--}" "$plr_code" \
        "${fault_at:--}" "${detect:--}" "${plr:--}" "${first:--}"
done
echo
echo "COMPLETE_MS: wall time of the dry run of n pods (agents up, /start, sleep ${sleep_s}s, /shutdown, teardown)."
echo "RUNNING_MS: when every agent was RUNNING (dry-run clock). FAULT_AT_MS: when the operator decided the PLR."
echo "DETECT_MS: the operator's fault detection for it: the worker's end to that decision (the agent's GET /status"
echo "read on its change included; --hyperpod-poll 1s, --hyperpod-read-on-change true, the defaults)."
echo "PLR_MS: the operator's restart figure for that PLR: its decision to every agent RUNNING again"
echo "(/stop to every agent, READY, /start with faultCount 1, RUNNING). FIRST_RESTART: its type, reason and pods"
echo "(anything but PLR WorkerCrash in hpbench-pods-0 means another fault came first: the PLR_MS is that one's)."
