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
set -euo pipefail
cd "$(dirname "$0")/.."
RV_SIZES="${RV_SIZES:-4 8 16 32 64 256 1024}"
TR_SIZES="${TR_SIZES:-4 8 16 32}"
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
  # What N children cost to start on this machine, with no launcher (one process spawning them).
  python3 scripts/bench/recovery.py baseline "$n"
done
