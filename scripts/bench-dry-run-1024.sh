#!/usr/bin/env bash
# A dry run at its cap (issue 37 item 2): seed 000's job with 1,024 replicas (a master and 1,023
# workers, each `sleep 1`), one real launcher each, under `/usr/bin/time -v`: the wall time from
# submit to the dry run's exit (pods created one at a time, the job Succeeded, every pod
# Completed) and the dry-run process's peak RSS (the launchers are processes of their own).
#
#   bash scripts/bench-dry-run-1024.sh            # RANKVISOR_BIN: the rankvisor to run (default:
#                                                 # the lean release build, rankvisor-dry-run beside it)
#   REPLICAS=512 ROUNDS=3 bash scripts/bench-dry-run-1024.sh
set -euo pipefail
cd "$(dirname "$0")/.."
replicas=${REPLICAS:-1024}
rounds=${ROUNDS:-1}
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
if [ -z "${RANKVISOR_BIN:-}" ]; then
  cargo build --release --quiet -p rankvisor --bin rankvisor
  cargo build --release --quiet -p rankvisor-dryrun --bin rankvisor-dry-run
  mkdir -p "$target_dir/bench-dry-run"
  cp "$target_dir/release/rankvisor" "$target_dir/release/rankvisor-dry-run" "$target_dir/bench-dry-run/"
  RANKVISOR_BIN=$target_dir/bench-dry-run/rankvisor
fi
[ -x /usr/bin/time ] || { echo "bench-dry-run-1024: needs /usr/bin/time (Debian package time)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed -e "s/replicas: 3/replicas: $((replicas - 1))/" -e 's/sleep 3/sleep 1/' examples/pytorchjob.yaml > "$dir/job.yaml"
echo "dry run of $replicas replicas, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, open files $(ulimit -n), rankvisor $RANKVISOR_BIN"
for _ in $(seq 1 "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -v "$RANKVISOR_BIN" dry-run --master-port 0 --timeout 600s "$dir/job.yaml" > "$dir/out" 2> "$dir/err" || true
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/err")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/err")
  code=$(sed -n 's/.*Exit status: //p' "$dir/err")
  state=$(grep '^pytorchjob' "$dir/out" | tail -1 | awk '{print $2, $3}')
  completed=$(grep '^pod/' "$dir/out" | awk '{last[$1]=$3} END {n=0; for (p in last) if (last[p]=="Completed") n++; print n}')
  echo "replicas=$replicas load=$load wall=$wall dry_run_peak_rss_kb=$rss exit=$code job=\"$state\" pods_completed=$completed"
done
