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

somaxconn=$(cat /proc/sys/net/core/somaxconn)
if [ "$(id -u)" = 0 ] && [ "${RAISE_SOMAXCONN:-0}" = 1 ] && [ "$somaxconn" -lt 16384 ]; then
  if sysctl -qw net.core.somaxconn=16384 2>/dev/null; then
    trap 'sysctl -qw net.core.somaxconn='"$somaxconn" EXIT
    echo "net.core.somaxconn raised from $somaxconn to 16384 for the run"
  fi
fi
echo "net.core.somaxconn=$(cat /proc/sys/net/core/somaxconn) ulimit -Hn=$(ulimit -Hn) BENCH_DIAL=${BENCH_DIAL:-2000} cores=$(nproc)"

for n in $SIZES; do
  "$bin" "$n"
done
