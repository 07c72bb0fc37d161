#!/usr/bin/env bash
# Rendezvous scale benchmark: one master launcher's barrier against 1,024, 4,096 and 16,384
# simulated replicas on loopback (examples/bench_rendezvous.rs), printing the barrier time (from
# the first dial to every worker released) and the master's peak RSS and CPU.
#
#   bash scripts/bench-rendezvous.sh            # SIZES="1024 4096 16384" by default
#   SIZES="65536" bash scripts/bench-rendezvous.sh
#
# One process opens all the worker connections, spreading its source addresses over 127.0.0.0/8
# so N connections to one port never run out of ephemeral ports. Each process needs N file
# descriptors: the binary raises its soft limit to the hard one (`ulimit -Hn`).
#
# Each process needs N+64 descriptors and cannot go past `ulimit -Hn` (20000 on the machine measured,
# so about 19,900 replicas at most there).
#
# The master listens with a backlog of 8192, which the kernel caps at net.core.somaxconn (4096
# here). The fleet keeps BENCH_DIAL (2000) dials in flight, so the accept queue never overflows.
# RAISE_SOMAXCONN=1 (as root) raises somaxconn to 16384 for the run and restores it afterwards; on
# loopback it made no measurable difference (16,384 replicas: 1.29-1.70 s either way, with
# BENCH_DIAL=2000 or 16384), so it is off by default.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES="${SIZES:-1024 4096 16384}"
target="${CARGO_TARGET_DIR:-target}"

cargo build --release
cargo build --release --example bench_rendezvous
bin="$target/release/examples/bench_rendezvous"

ulimit -n "$(ulimit -Hn)"
tmp=$(mktemp -d)
restore=""
trap 'rm -rf "$tmp"; if [ -n "$restore" ]; then sysctl -qw net.core.somaxconn="$restore"; fi' EXIT
somaxconn=$(cat /proc/sys/net/core/somaxconn)
if [ "$(id -u)" = 0 ] && [ "${RAISE_SOMAXCONN:-0}" = 1 ] && [ "$somaxconn" -lt 16384 ]; then
  if sysctl -qw net.core.somaxconn=16384 2>/dev/null; then
    restore=$somaxconn
    echo "net.core.somaxconn raised from $somaxconn to 16384 for the run"
  fi
fi
echo "net.core.somaxconn=$(cat /proc/sys/net/core/somaxconn) ulimit -Hn=$(ulimit -Hn) BENCH_DIAL=${BENCH_DIAL:-2000} cores=$(nproc)"

echo "== the rendezvous master alone (MasterHandle on a current-thread runtime)"
for n in $SIZES; do
  "$bin" "$n"
done

# The same fleet against the real launcher: `rankvisor` as replica 0 of an N-replica job, whose
# child reports the launcher's peak RSS once the barrier has released it.
echo "== the rankvisor launcher as the master (child started after the barrier)"
rv="$target/release/rankvisor"
for n in $SIZES; do
  port=$((20000 + RANDOM % 20000))
  env -i PATH="$PATH" RANK=0 PET_NODE_RANK=0 WORLD_SIZE="$n" PET_NNODES="$n" MASTER_ADDR=127.0.0.1 \
    MASTER_PORT="$port" "$rv" --job-name bench --http-addr off --node-health off --rendezvous-timeout 5m \
    -- sh -c 'sleep 1; grep VmHWM /proc/$PPID/status' >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  sleep 0.2
  t0=$(date +%s%N)
  "$bin" --fleet $((port + 1)) $((n - 1))
  t1=$(date +%s%N)
  status=0
  wait "$pid" || status=$?
  echo "replicas=$n barrier_ms=$(((t1 - t0) / 1000000)) launcher_peak_rss_kb=$(awk '{print $2}' "$tmp/out") exit=$status"
done
