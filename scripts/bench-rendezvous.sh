#!/usr/bin/env bash
# Rendezvous at scale: the barrier of one master against N-1 simulated workers on loopback
# (crates/rankvisor-core/examples/bench_rendezvous.rs), for 1,024, 4,096, 16,384, 65,536 and 98,304 replicas.
#
#   bash scripts/bench-rendezvous.sh                 # SIZES="1024 4096 16384 65536 98304"
#   SIZES="16384" ROUNDS=3 bash scripts/bench-rendezvous.sh
#   BENCH_NETNS=host bash scripts/bench-rendezvous.sh   # in the host's network namespace (conntrack)
#   BENCH_CHECKPOINT=1 SIZES=1024 ROUNDS=5 bash scripts/bench-rendezvous.sh   # the job saves together
#
# Two masters per size: the REAL launcher (`rankvisor` as replica 0 of an N-replica job, the lean
# build images/build.sh ships; its peak RSS and CPU from wait4 over its whole life), then the
# library's master alone (rendezvous::start_master on a current-thread runtime, as the launcher
# runs it). Printed per size: barrier_ms (the fleet's first dial -> the last worker released, on
# CLOCK_MONOTONIC), dialled_ms (-> the last hello written), the master's peak RSS and CPU, the
# load average before the run, and for the launcher the most handshakes it had in flight at once
# (from its log); then a summary per size: medians and ranges, RSS and CPU per replica.
#
# Descriptors: the master holds one connection per worker, so it needs N+64 open files in one
# process. As root the script raises the hard limit (`ulimit -Hn`), fs.nr_open and fs.file-max when
# they are lower; that needs CAP_SYS_RESOURCE. Where the hard limit cannot be raised (a container
# without CAP_SYS_RESOURCE: this project's VM is capped at 20,000), a size that does not fit is
# reported as not measurable, and the largest size that fits (the ceiling) is measured instead.
# The workers are spread over as many fleet processes as the limit needs (BENCH_FLEETS to force),
# each binding its sockets to source addresses spread over 127.0.0.0/8 (250 per address), so no
# source address runs out of ephemeral ports. BENCH_DIAL (default 2000) bounds each fleet's dials
# in flight, below the listen backlog (net.core.somaxconn caps the master's 8192).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES="${SIZES:-1024 4096 16384 65536 98304}"
ROUNDS="${ROUNDS:-1}"
say() { printf '[bench-rendezvous] %s\n' "$*" >&2; }

# The launcher exactly as the image ships it (or RANKVISOR_BIN), and the bench program (release,
# default target).
# shellcheck source=bench/lean-launcher.sh
source scripts/bench/lean-launcher.sh
if [ -n "${BENCH_BIN:-}" ]; then
  bench=$BENCH_BIN
else
  cargo build --release --quiet -p rankvisor-core --example bench_rendezvous
  bench="$target_dir/release/examples/bench_rendezvous"
fi

# A network namespace of its own (BENCH_NETNS=own, the default as root): its loopback has no
# netfilter rules, so no connection is tracked by conntrack. In the host's namespace (BENCH_NETNS=host)
# Docker's NAT rules make the kernel track every loopback connection: a cost on both ends of every
# packet that, in a cluster, the master's node and each worker's node pay apart, and a table that a
# 16K run fills for two minutes (it then drops SYNs: other loopback users on the machine stall too).
netns=${BENCH_NETNS:-own}
if [ "$netns" = own ] && [ -z "${RANKVISOR_BENCH_IN_NETNS:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
    export RANKVISOR_BENCH_IN_NETNS=1 RANKVISOR_BIN=$launcher BENCH_BUILD=$build BENCH_BIN=$bench
    exec unshare --net -- bash -c 'ip link set lo up && exec bash "$0"' "$0"
  fi
  say "cannot make a network namespace (needs root, unshare and ip): measuring in the host's (BENCH_NETNS=host)"
  netns=host
fi
[ -n "${BENCH_BUILD:-}" ] && build=$BENCH_BUILD

largest=0
for n in $SIZES; do [ "$n" -gt "$largest" ] && largest=$n; done
want=$((largest + 1024))
if [ "$(id -u)" = 0 ]; then
  [ "$(cat /proc/sys/fs/nr_open)" -ge "$want" ] || sysctl -qw fs.nr_open="$want" || say "cannot raise fs.nr_open"
  [ "$(cat /proc/sys/fs/file-max)" -ge $((2 * want + 65536)) ] || sysctl -qw fs.file-max=$((2 * want + 65536)) || say "cannot raise fs.file-max"
  if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want" ]; then
    ulimit -Hn "$want" 2>/dev/null || say "cannot raise the hard open-files limit from $(ulimit -Hn) to $want (no CAP_SYS_RESOURCE here)"
  fi
fi
# Loopback connections are tracked by netfilter when the host has conntrack rules: each run leaves
# up to 2 entries per replica for two minutes (TIME_WAIT), and a full table drops packets (SYN
# retransmits after 1, 3, 7, 15 s: the earliest simulated workers, which send no heartbeats, are
# then dropped for silence). As root the table is raised; before each run the script waits for room.
ct_max=/proc/sys/net/netfilter/nf_conntrack_max
ct_count=/proc/sys/net/netfilter/nf_conntrack_count
if [ -z "${RANKVISOR_BENCH_IN_NETNS:-}" ] && [ "$(id -u)" = 0 ] && [ -w "$ct_max" ] && [ "$(cat "$ct_max")" -lt 1048576 ]; then
  sysctl -qw net.netfilter.nf_conntrack_max=1048576 || say "cannot raise net.netfilter.nf_conntrack_max"
fi
conntrack_room() {
  [ -r "$ct_count" ] || return 0
  local need=$((4 * $1)) waited=0
  while [ $(($(cat "$ct_count") + need)) -gt "$(cat "$ct_max")" ] && [ "$waited" -lt 150 ]; do
    [ "$waited" = 0 ] && say "waiting for room in the conntrack table ($(cat "$ct_count") of $(cat "$ct_max") entries)"
    sleep 5
    waited=$((waited + 5))
  done
}
ulimit -n "$(ulimit -Hn)"
hard=$(ulimit -Hn)
ceiling=$((hard - 100))
echo "rendezvous at scale, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  launcher: $build"
echo "  network namespace: $([ -n "${RANKVISOR_BENCH_IN_NETNS:-}" ] && echo "its own (loopback without conntrack)" || echo "the host's (conntrack: $(cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo -) entries)")"
echo "  open files: hard limit $hard (fs.nr_open $(cat /proc/sys/fs/nr_open), fs.file-max $(cat /proc/sys/fs/file-max));" \
  "net.core.somaxconn $(cat /proc/sys/net/core/somaxconn); nf_conntrack_max $(cat "$ct_max" 2>/dev/null || echo -); BENCH_DIAL ${BENCH_DIAL:-2000}"

sizes=""
for n in $SIZES; do
  if [ "$n" -gt "$ceiling" ]; then
    echo "replicas=$n NOT MEASURABLE here: the master needs $((n + 64)) open files in one process, the hard limit is $hard (scripts/bench-rendezvous-vm.sh measures it in a guest)"
    case " $sizes " in *" $ceiling "*) ;; *) sizes="$sizes $ceiling" ;; esac
  else
    sizes="$sizes $n"
  fi
done
# Workers per fleet process: what one process may open.
per_fleet=$((hard - 200))
results=$(mktemp)
trap 'rm -f "$results"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
# BENCH_CHECKPOINT=1 (issue 37 item 4, --checkpoint-signal): the launcher runs with
# --checkpoint-signal SIGUSR1; once the barrier released everyone, simulated worker 1 reports
# Stopping (a preempted replica's state frame) and every simulated worker times the master's
# checkpoint frame. Printed: from that stop frame written to the first and to the last worker's
# checkpoint frame read (CLOCK_MONOTONIC, one machine), how many got it, and whether the master's
# own child got SIGUSR1 (its log). A real worker then signals its own child: one kill(2) on its node.
checkpoint_round() {
  local n=$1 fleets=$2 figures l line signalled
  figures=$(mktemp)
  l=$(load)
  line=$(RANKVISOR_CHECKPOINT_SIGNAL=SIGUSR1 BENCH_CHECKPOINT=$figures BENCH_FLEETS=$fleets \
    BENCH_LAUNCHER_LOG="$target_dir/bench-rendezvous-launcher.log" "$bench" --launcher "$launcher" "$n")
  signalled=$(grep -c 'SIGUSR1 to the training process' "$target_dir/bench-rendezvous-launcher.log" || true)
  python3 - "$figures" "$n" "$l" "$signalled" "$line" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
n, load, signalled, line = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
stop = max((r[0] for r in rows), default=0)
got = [r for r in rows if r[3] > 0]
count = sum(r[3] for r in rows)
if not stop or not got:
    print(f"checkpoint: load={load} replicas={n} FAILED: no stop frame or no checkpoint frame ({line})")
    sys.exit(1)
first = (min(r[1] for r in got) - stop) / 1e6
last = (max(r[2] for r in got) - stop) / 1e6
print(f"checkpoint: load={load} replicas={n} workers_signalled={count}/{n - 1} master_child_signalled={'yes' if signalled != '0' else 'no'} "
      f"first_ms={first:.1f} all_ms={last:.1f} ({line.split(' launcher_exit')[0].split('replicas=')[1].split(' ', 1)[1]})")
PY
  rm -f "$figures"
}
for n in $sizes; do
  fleets=${BENCH_FLEETS:-$(((n - 1 + per_fleet - 1) / per_fleet))}
  for _ in $(seq 1 "$ROUNDS"); do
    if [ "${BENCH_CHECKPOINT:-0}" = 1 ]; then
      checkpoint_round "$n" "$fleets"
      continue
    fi
    # The load average (1 min) before each run: the machine is shared, wall-clock figures are not
    # comparable across loads.
    conntrack_room "$n"
    l=$(load)
    line=$(BENCH_FLEETS=$fleets BENCH_LAUNCHER_LOG="$target_dir/bench-rendezvous-launcher.log" "$bench" --launcher "$launcher" "$n")
    peak=$(grep -o 'handshakes_peak=[0-9]*' "$target_dir/bench-rendezvous-launcher.log" | head -1 || true)
    echo "launcher: load=$l $line $peak" | tee -a "$results"
    conntrack_room "$n"
    l=$(load)
    echo "library:  load=$l $(BENCH_FLEETS=$fleets "$bench" "$n")" | tee -a "$results"
  done
done
echo "  (the launcher's log of the last run: $target_dir/bench-rendezvous-launcher.log)"
# Medians and ranges per size and master (barrier, peak RSS, CPU; per replica for RSS and CPU).
python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    who = line.split(":")[0].strip()
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    if not f.get("barrier_ms", "").isdigit():
        continue
    n = int(f["replicas"])
    rss = int(f.get("launcher_peak_rss_kb") or f.get("master_peak_rss_kb"))
    cpu = int(f.get("launcher_cpu_ms") or f.get("master_cpu_ms"))
    rows.setdefault((n, who), []).append((int(f["barrier_ms"]), rss, cpu, float(f["load"])))
print("summary: replicas master runs | barrier ms median [min-max] | peak RSS MiB median [min-max] (KiB per replica, base included) | CPU ms median (us/replica) | load [min-max]")
for (n, who), runs in sorted(rows.items()):
    b, r, c, l = (sorted(x[i] for x in runs) for i in range(4))
    med = statistics.median
    print(f"summary: {n} {who} {len(runs)} | {med(b):.0f} [{b[0]}-{b[-1]}] | {med(r) / 1024:.1f} [{r[0] / 1024:.1f}-{r[-1] / 1024:.1f}] ({med(r) / n:.2f}) "
          f"| {med(c):.0f} ({med(c) * 1000 / n:.0f}) | [{l[0]}-{l[-1]}]")
PY

# The job's stacks (issue 36): the master gathers every replica's summary over the control channel
# and groups them, from STACKS_SIZE (default 1,024) simulated workers in one process; target <= 5 s.
# The workers answer at once: a real replica's own snapshot (rankvisor-stacks, in parallel on its
# node) comes on top.
for n in ${STACKS_SIZE:-1024}; do
  echo "stacks: load=$(load) $("$bench" --stacks "$n" "${STACKS_ROUNDS:-5}" | tr '\n' ' ')" | sed 's/ summary="[^"]*"//g'
done
