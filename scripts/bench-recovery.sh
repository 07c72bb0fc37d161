#!/usr/bin/env bash
# A job-wide restart beside torchrun (issue 37 item 1): N launchers on this machine, one child
# exits 1 (or prints a line a log rule faults on), the time until every child of the next
# generation runs (p50, p99 over FAULTS faults).
# rankvisor: the lean launcher (images/build.sh, or RANKVISOR_BIN) with --restart-scope job and its
# rendezvous on loopback. torchrun: the torch venv's elastic agents (scripts/setup-torch.sh),
# --nnodes N --rdzv-backend c10d --no-python, the same child (scripts/bench/recovery.py).
#
#   bash scripts/bench-recovery.sh                       # RV_SIZES="4 8 16 32 64 256 1024" TR_SIZES="4 8 16 32" FAULTS=20
#   RV_SIZES=8 TR_SIZES=8 FAULTS=5 bash scripts/bench-recovery.sh
#   RV_SIZES= TR_SIZES= bash scripts/bench-recovery.sh     # an empty list skips that part
#   CHILD=c bash scripts/bench-recovery.sh               # the child as a static C program (its start is cheap)
#   PIDNS=1 ...                                          # each rankvisor launcher PID 1 of its own PID namespace
#   SIM_SIZES="1024 16384" (the default): the same job-wide restart with the rendezvous bench's
#   simulated replicas (crates/rankvisor-core/examples/bench_rendezvous.rs, BENCH_RESTARTS): the
#   real launcher as replica 0, every other replica a connection whose child's stop and start
#   are not simulated (they answer the master's restart at once); a fault -> every replica's
#   release of the next generation. SIM_SIZES= (empty) to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
RV_SIZES="${RV_SIZES-4 8 16 32 64 256 1024}"
TR_SIZES="${TR_SIZES-4 8 16 32}"
SIM_SIZES="${SIM_SIZES-1024 16384}"
FAULTS="${FAULTS:-20}"
# shellcheck source=bench/lean-launcher.sh
source scripts/bench/lean-launcher.sh
eval "$(bash scripts/setup-torch.sh)"
torchrun="$RANKVISOR_TORCH_VENV/bin/torchrun"
echo "# build: $build; torch venv: $RANKVISOR_TORCH_VENV; $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# a fault: one child exits 1 -> every child of the next generation running; $FAULTS faults per size"
for n in $TR_SIZES; do
  python3 scripts/bench/recovery.py torchrun "$torchrun" "$n" "$FAULTS"
done
for n in $RV_SIZES; do
  python3 scripts/bench/recovery.py rankvisor "$launcher" "$n" "$FAULTS"
  # The same fault as a line that a log rule (faultOnMatch) catches: the child does not exit.
  [ -n "${NO_RULE:-}" ] || python3 scripts/bench/recovery.py rankvisor-rule "$launcher" "$n" "$FAULTS"
  # What N children cost to start on this machine, with no launcher (one process spawning them);
  # and to be stopped, reaped and started again (the processes' own part of a restart).
  python3 scripts/bench/recovery.py baseline "$n"
done
# The simulated replicas: one fleet process holds them all (a round waits for every release), in a
# network namespace of its own as root (loopback without conntrack, as scripts/bench-rendezvous.sh).
if [ -n "$SIM_SIZES" ]; then
  cargo build --quiet --release -p rankvisor-core --example bench_rendezvous
  bench="$target_dir/release/examples/bench_rendezvous"
  netns=() where=host
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
    netns=(unshare --net -- sh -c 'ip link set lo up && exec "$@"' sh) where=own
  fi
  ulimit -n "$(ulimit -Hn)"
  for n in $SIM_SIZES; do
    line=$("${netns[@]}" env BENCH_RESTARTS="$FAULTS" BENCH_FLEETS=1 BENCH_LAUNCHER_LOG="$target_dir/bench-recovery-sim.log" "$bench" --launcher "$launcher" "$n")
    echo "simulated: load=$(cut -d' ' -f1 /proc/loadavg) netns=$where $line"
  done
fi
