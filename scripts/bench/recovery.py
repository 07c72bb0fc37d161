"""A job-wide restart, measured: N launchers on this machine, one child's fault, the time until
every child of the next generation runs. rankvisor (`--restart-scope job`, its rendezvous over
loopback) beside torchrun's elastic agents (`--rdzv-backend c10d --no-python`), the same child.

Usage: python3 scripts/bench/recovery.py rankvisor LAUNCHER N FAULTS
       python3 scripts/bench/recovery.py rankvisor-rule LAUNCHER N FAULTS  (the fault is a line a
           log rule with faultOnMatch catches; the child goes on until rankvisor stops it)
       python3 scripts/bench/recovery.py torchrun TORCHRUN N FAULTS
       python3 scripts/bench/recovery.py baseline N     (N children started at once, no launcher;
           and N running children stopped, reaped and started again by one process)

The child is one bash script for both, or with CHILD=c the same protocol as a static C program
(scripts/bench/recovery_child.c, built with gcc into the work directory): its start costs a
fraction of bash's, so the figure is mostly the launchers' part. With PIDNS=1 each rankvisor
launcher runs as PID 1 of a PID namespace of its own (`unshare --pid --fork --mount-proc`, as in a
container): its /proc then shows its own processes, not the other launchers' (root only). It reads the harness's round number when it starts and
appends `ROUND RANK START_US` to a log (bash builtins only: no fork before the record); in round r the victim (rank 1 + r mod (N-1)) waits for the
harness's trigger, writes its exit time and exits 1. The harness waits for the N starts of a round,
then moves the round on and pulls the trigger: a fault's recovery is the last start of the next
round minus the victim's exit. One line of JSON per launcher kind and size: p50, p99, max (ms).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

CHILD = r"""
read -r r < "$OUT/round"
echo "$r $RANK ${EPOCHREALTIME/./}" >> "$OUT/starts"
victim=$(( 1 + r % (N - 1) ))
if [ "$RANK" = "$victim" ]; then
  while [ ! -e "$OUT/fault-$r" ]; do sleep 0.005; done
  echo "${EPOCHREALTIME/./}" > "$OUT/exit-$r"
  if [ "$FAULT_BY" = rule ]; then
    echo "step failed: FAULT"
    exec sleep 100000
  fi
  exit 1
fi
exec sleep 100000
"""

CHILD_KIND = "c" if os.environ.get("CHILD") == "c" else "bash"


def free_port():
    """A port P with P+1 free too: rankvisor's rendezvous listens on MASTER_PORT+1."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("0.0.0.0", port + 1))
            return port
        except OSError:
            continue


def starts(out):
    rounds = {}
    try:
        with open(os.path.join(out, "starts")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    rounds.setdefault(int(parts[0]), {})[parts[1]] = int(parts[2])
    except FileNotFoundError:
        pass
    return rounds


def wait_round(out, r, n, procs, limit=120.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = starts(out).get(r, {})
        if len(got) >= n:
            return got
        for rank, p in enumerate(procs):
            if p.poll() is not None:
                with open(os.path.join(out, f"launcher-{rank}.log")) as f:
                    said = f.read()[-2000:]
                raise SystemExit(f"launcher {rank} exited ({p.returncode}) in round {r}:\n{said}")
        time.sleep(0.005)
    raise SystemExit(f"round {r}: {len(starts(out).get(r, {}))} of {n} children started within {limit} s")


def launch(kind, prog, n, out, child):
    port = free_port()
    procs = []
    rules = os.path.join(out, "rules.json")
    with open(rules, "w") as f:
        f.write('[{"name": "Fault", "logPattern": ".*FAULT.*", "faultOnMatch": true}]')
    for rank in range(n):
        fault_by = "rule" if kind == "rankvisor-rule" else "exit"
        env = dict(os.environ, OUT=out, N=str(n), RANK=str(rank), FAULT_BY=fault_by)
        if kind.startswith("rankvisor"):
            env.update(
                PET_NODE_RANK=str(rank), WORLD_SIZE=str(n), PET_NNODES=str(n), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port), POD_NAME=f"bench-{'master' if rank == 0 else 'worker'}-{rank}",
            )
            argv = [prog, "--http-addr", "off", "--node-health", "off", "--restart-scope", "job",
                    "--restart-policy", "OnFailure", "--backoff-limit", "100000", "--grace-period", "5s",
                    "--rendezvous-timeout", "300s", "--log-level", "warn"]
            if fault_by == "rule":
                argv += ["--log-rules", rules]
            argv += ["--", *child]
            if os.environ.get("PIDNS") == "1":
                # As in a container: the launcher is PID 1 of a PID namespace of its own, whose
                # /proc shows its own processes only (a shutdown's order reads /proc).
                argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *argv]
        else:
            env["RANK_FILE_UNUSED"] = ""
            argv = [prog, "--nnodes", str(n), "--nproc-per-node", "1", "--node-rank", str(rank),
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bench",
                    "--max-restarts", "100000", "--no-python", *child]
            # torchrun gives its worker RANK itself (the global rank); the child reads it.
            env.pop("RANK")
        procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(out, f"launcher-{rank}.log"), "w"),
                                      start_new_session=True))
    return procs


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def workdir(name):
    """A fresh directory with the child and round 0: (directory, the child's argv)."""
    out = tempfile.mkdtemp(prefix=f"bench-recovery-{name}-")
    if os.environ.get("CHILD") == "c":
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recovery_child.c")
        binary = os.path.join(out, "child")
        subprocess.run(["gcc", "-O2", "-static", "-o", binary, source], check=True)
        child = [binary]
    else:
        script = os.path.join(out, "child.sh")
        with open(script, "w") as f:
            f.write(CHILD)
        child = ["bash", script]
    with open(os.path.join(out, "round"), "w") as f:
        f.write("0")
    return out, child


def start_children(n, out, child):
    """N children started at once by one process (each its own rank-0 child, never a victim)."""
    env = dict(os.environ, OUT=out, N=str(n + 1), RANK="0")
    return [subprocess.Popen(child, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]


def wait_started(out, n):
    """Wait until the starts log has N lines; the last start (epoch us)."""
    path = os.path.join(out, "starts")
    deadline = time.monotonic() + 120
    while True:
        try:
            with open(path) as f:
                lines = [line for line in f if len(line.split()) == 3]
        except FileNotFoundError:
            lines = []
        if len(lines) >= n:
            return max(int(line.split()[2]) for line in lines)
        if time.monotonic() > deadline:
            raise SystemExit("baseline: the children did not start")
        time.sleep(0.002)


def baseline(n):
    """N children started at once by one process, until all N run: the children's own start,
    which a restart of N replicas on this machine cannot take less than."""
    out, child = workdir(f"baseline-{n}")
    t0 = time.time()
    return finish_children(out, child, n, t0)


def finish_children(out, child, n, t0):
    """Start N children, wait for them all, kill them and clear `out`: ms from `t0` (epoch s) to
    the last start."""
    procs = start_children(n, out, child)
    last = wait_started(out, n)
    for p in procs:
        p.kill()
        p.wait()
    shutil.rmtree(out, ignore_errors=True)
    return (last - t0 * 1e6) / 1e3


def baseline_restart(n):
    """What a job-wide restart makes the processes themselves do, with no launcher: N children
    running; one process sends each SIGTERM, reaps each, then starts N new, until all N run. From
    the first SIGTERM: the floor of a restart of N replicas on this machine, the children's stop
    and reaping included (baseline() has their start alone)."""
    out, child = workdir(f"baseline-restart-{n}")
    procs = start_children(n, out, child)
    wait_started(out, n)
    t0 = time.time()
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()
    os.remove(os.path.join(out, "starts"))
    return finish_children(out, child, n, t0)


def main():
    if sys.argv[1] == "baseline":
        n = int(sys.argv[2])
        ms = [baseline(n) for _ in range(5)]
        again = [baseline_restart(n) for _ in range(5)]
        print(json.dumps({"launcher": "none (children alone)", "child": CHILD_KIND, "n": n, "p50_ms": round(pct(ms, 0.5), 1),
                          "max_ms": round(max(ms), 1), "stop_and_start_p50_ms": round(pct(again, 0.5), 1),
                          "stop_and_start_max_ms": round(max(again), 1)}), flush=True)
        return
    kind, prog, n, faults = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    out, child = workdir(f"{kind}-{n}")
    t0 = time.monotonic()
    procs = launch(kind, prog, n, out, child)
    gaps = []
    try:
        wait_round(out, 0, n, procs)
        first_ms = (time.monotonic() - t0) * 1000
        for r in range(faults):
            with open(os.path.join(out, "round.tmp"), "w") as f:
                f.write(str(r + 1))
            os.replace(os.path.join(out, "round.tmp"), os.path.join(out, "round"))
            open(os.path.join(out, f"fault-{r}"), "w").close()
            nxt = wait_round(out, r + 1, n, procs)
            with open(os.path.join(out, f"exit-{r}")) as f:
                exited = int(f.read())
            gaps.append((max(nxt.values()) - exited) / 1e3)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 20
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        subprocess.run(["pkill", "-f", child[-1]], check=False)
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {out}", file=sys.stderr)
        else:
            shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"launcher": kind, "child": CHILD_KIND, "n": n, "faults": len(gaps), "first_start_ms": round(first_ms),
                      "p50_ms": round(pct(gaps, 0.5), 1), "p99_ms": round(pct(gaps, 0.99), 1),
                      "max_ms": round(max(gaps), 1)}), flush=True)


if __name__ == "__main__":
    main()
