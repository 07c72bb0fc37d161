#!/usr/bin/env python3
"""Chaos soak of `rankvisor dry-run` (issue 15, item 6): an 8-replica PyTorchJob
(examples/chaos-job.yaml: 1 Master + 7 Workers, OnFailure, backoffLimit 10000) runs for
--duration seconds while a seeded RNG applies one random fault every few seconds, and after each
step the soak checks the invariants below. Python 3 stdlib only; Linux (/proc).

Faults (kinds):
  launcher-stop   SIGSTOP a launcher, SIGCONT it 2-6 s later
  child-crash     SIGKILL a training child (a launcher's child)
  child-hang      SIGSTOP a training child; the master's is caught by its hang timeout (killed,
                  restarted); a worker's is hidden by its peers' beats on the shared heartbeat file,
                  so it is SIGCONTed after hang-timeout + 8 s (a transient hang)
  hostile-peer    on the rendezvous port (MASTER_PORT+1): garbage bytes, a bogus hello (wrong job,
                  index out of range, wrong count, wrong version, a live worker's identity without
                  the job token's proof, an oversized line), or a silent connection held 5-20 s
  http-flood      on the launchers' --http ports: 40-120 parallel connections, half of them slow
                  (partial headers trickled, then held), half full GETs of /status, /metrics, ...
  label-flip      `--inject label:REPLICA@T=chaos.rankvisor.dev/flip=vN` or `...@T=Schedulable` (the
                  health key rewritten) at random times (the dry run takes injections up front):
                  the labels file changes, the node stays healthy
  pod-delete      `--inject delete:REPLICA@T` at random times: the launcher is killed, the pod recreated
  launcher-kill   kill -9 of a launcher from outside (the container's PID 1 killed): its training
                  child and whatever it started must be gone before the dry run prints the
                  container's end (Error), as the kernel ends a PID namespace with its PID 1; under
                  OnFailure the kubelet starts a new launcher in the same pod (RESTARTS+1)
A launcher forwards the SIGCONT it receives to its child's process group, so a launcher-stop's
SIGCONT also ends a child-hang of that launcher's child (counted as hang-ended-by-forwarded-sigcont).
The seed fixes the faults' kinds, targets and delays; process timing still varies between runs.

Checks after every step (and at every 1 s sample): the dry run is alive and printing; no zombie
(State Z) anywhere below it for over 3 s, except below a child we stopped; its fd count stays
below 2x (and RSS below +100 MiB of) the peak of the first minute; the same per replica for the
launchers (measured when no connection of ours is held); every launcher seen to exit is accounted
for by a Pod row of its replica printed after its exit (or its pod already shown Completed or
Error); every child crash is followed by a Pod row of its replica; a hung master child is caught
(a row of master-0 within hang-timeout + grace + 15 s). At the end: the dry run's exit status and
the job's last state are what `expected_outcome` says, and no process of the run is left over
(found by the run's own directory in /proc/*/environ).

Exit 0 when every check passed, 1 on any violation, 2 on a usage or setup error.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1024 * 1024

DEFAULT_KINDS = ["launcher-stop", "launcher-kill", "child-crash", "child-hang", "hostile-peer", "http-flood"]
UP_FRONT_KINDS = ["label-flip", "pod-delete"]
# Fault classes that expose a known rankvisor bug: left out unless --include-known-bugs. None today
# (launcher-kill was one until the dry run emulated the PID namespace's end and the kubelet's restart).
KNOWN_BUG_KINDS = {}
KILL_TEARDOWN_S = 15  # a killed launcher's processes must be gone within this, printed row or not
KILL_RESTART_S = 30  # and a new launcher started in its pod (the kubelet's back-off is at most 10 s)
ZOMBIE_GRACE_S = 3
HANG_TIMEOUT_S = 6  # RANKVISOR_HANG_TIMEOUT in examples/chaos-job.yaml
BACKOFF_LIMIT = 10000  # runPolicy.backoffLimit in examples/chaos-job.yaml


def log(msg):
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- /proc helpers


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(p) for p in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def descendants(pid):
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children(p):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rindex(")") + 2]
    except (OSError, ValueError):
        return None


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return "?"


def http_answers(port, path, timeout=2.0):
    """Whether 127.0.0.1:port answers a GET with an HTTP status line."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            return s.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def pod_replica(pod):
    """chaos-worker-3 -> worker-3."""
    m = re.search(r"-(master-\d+|worker-\d+)$", pod or "")
    return m.group(1) if m else None


# ---------------------------------------------------------------- the outcome the operator's rules give


def expected_outcome(faults, include_unhealthy_labels=False):
    """The job's final state under the training operator's rules, for this soak's job.

    - restartPolicy OnFailure on every replica: a crashed, hung (killed by the hang timeout) or
      deleted child/pod is restarted/recreated; none of these fails a replica for good.
    - The job is Failed when the restarts summed over the pods reach runPolicy.backoffLimit
      (pastBackoffLimit): each child crash or caught hang is at most one restart, so the job
      stays below the limit while their count is below BACKOFF_LIMIT (pod deletions reset a
      pod's count, so they only lower the sum).
    - The job is Failed when every worker has failed at once while the master lives: under
      OnFailure a worker never reaches phase Failed (it restarts), so never.
    - A replica fails for good only if its launcher gives up: restart policy Never (not used),
      its backoff limit (= backoffLimit, not reached) or exit 138 for an unhealthy node (the
      label flips set another key: the node stays healthy).
    - The master's child ends with 0 once the soak's end epoch is past, whatever restarts it had,
      so the master completes: the job is Succeeded.
    """
    restarts = faults["child-crash"] + faults["child-hang"] + faults["launcher-kill"]
    if restarts >= BACKOFF_LIMIT:
        return "Failed", f"{restarts} restarts reach backoffLimit {BACKOFF_LIMIT}"
    if faults["launcher-kill"]:
        # The container's PID 1 killed (137) is a container crash: OnFailure restarts it in place.
        return "Succeeded", "OnFailure restarts every crashed or hung child and every container whose PID 1 was killed; the master completes"
    return "Succeeded", "OnFailure restarts every crashed or hung child, no replica gives up, the master completes"


# ---------------------------------------------------------------- the soak


class Violation(Exception):
    pass


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.faults = Counter()
        self.checks = Counter()
        self.violations = []
        self.lines = []  # (monotonic, parsed json)
        self.lines_lock = threading.Lock()
        self.notes = []  # (monotonic, stderr line)
        self.http_ports = {}
        self.master_port = None
        self.proc = None
        self.t0 = None
        self.baseline = {}  # key -> [max fds, max rss] over the first minute
        self.peak = defaultdict(lambda: [0, 0])
        self.launchers = {}  # pid -> replica
        self.exited_launchers = []  # (monotonic, replica, pid)
        self.pending_cont = []  # (due monotonic, pid, what)
        self.hung = {}  # child pid -> (replica, its launcher's pid)
        self.crashes = []  # (monotonic, replica)
        self.held_sockets = []  # (release at, socket)
        self.last_scan_at = 0.0
        self.bag = []
        self.stopped_launchers = {}  # pid -> replica, while SIGSTOPped by us
        self.resumed = []  # (SIGCONT at, replica, pid): its HTTP endpoint must answer again
        self.zombie_since = {}
        self.master_hangs = []  # when the master's child was stopped: its launcher must catch it
        self.zombies_reported = set()
        self.quiet_since = 0.0  # when the last held socket was released
        self.flood_answers = Counter()
        self.kills = []  # {at, replica, pid (the launcher), child (its training child, None once checked)}

    # -- setup

    def prepare(self):
        self.workdir = tempfile.mkdtemp(prefix="rankvisor-chaos-")
        with open(self.args.manifest) as f:
            text = f.read()
        self.end_epoch = int(time.time()) + self.args.duration
        marks = {"end": 0, "heartbeat master": 0, "heartbeat workers": 0}

        def sub(m):
            key, mark = m.group(2), m.group(3).strip()
            if mark == "end":
                marks["end"] += 1
                return f'{m.group(1)}"{self.end_epoch}" # chaos: end'
            if mark.startswith("heartbeat "):
                marks[mark] += 1
                who = mark.split()[1]
                return f'{m.group(1)}"{self.workdir}/{who}.hb" # chaos: {mark}'
            return m.group(0)

        text = re.sub(r'(value: )("[^"]*") # chaos: (.*)$', sub, text, flags=re.M)
        if marks["end"] != 2 or marks["heartbeat master"] != 1 or marks["heartbeat workers"] != 1:
            print(f"chaos: {self.args.manifest}: expected the '# chaos:' marks (end x2, heartbeat master, heartbeat workers), found {marks}", file=sys.stderr)
            sys.exit(2)
        self.manifest = os.path.join(self.workdir, "chaos-job.yaml")
        with open(self.manifest, "w") as f:
            f.write(text)

    def up_front_injections(self):
        """label flips and pod deletions at random times (the dry run takes them on its command line)."""
        specs = []
        d = self.args.duration
        last = max(d - self.args.tail, 20)
        replicas = ["master-0"] + [f"worker-{i}" for i in range(7)]
        n_labels = max(1, d // 40)
        n_deletes = max(1, d // 60) if "pod-delete" in self.kinds_up_front else 0
        if "label-flip" in self.kinds_up_front:
            for i in range(n_labels):
                t = self.rng.uniform(15, last)
                r = self.rng.choice(replicas)
                # Half set another key, half rewrite the health key with its healthy value.
                label = f"chaos.rankvisor.dev/flip=v{i}" if self.rng.random() < 0.5 else "Schedulable"
                specs.append(f"label:{r}@{int(t * 1000)}ms={label}")
                self.faults["label-flip"] += 1
        for _ in range(n_deletes):
            t = self.rng.uniform(15, last)
            r = self.rng.choice(replicas[1:])  # a recreated master waits in vain if the workers are done
            specs.append(f"delete:{r}@{int(t * 1000)}ms")
            self.faults["pod-delete"] += 1
        return specs

    def start(self):
        self.kinds = [k for k in DEFAULT_KINDS]
        self.kinds_up_front = list(UP_FRONT_KINDS)
        if self.args.include_known_bugs:
            self.kinds += list(KNOWN_BUG_KINDS)
        if self.args.only:
            wanted = self.args.only.split(",")
            self.kinds = [k for k in self.kinds + list(KNOWN_BUG_KINDS) if k in wanted]
            self.kinds_up_front = [k for k in UP_FRONT_KINDS if k in wanted]
        injections = self.up_front_injections()
        cmd = [self.args.binary, "dry-run", "--output", "json", "--http", "--master-port", "0",
               "--timeout", f"{self.args.duration + 120}s", "--launcher-log-level", "info"]
        for spec in injections:
            cmd += ["--inject", spec]
        cmd.append(self.manifest)
        log(f"seed {self.args.seed} (replay: scripts/chaos.py --duration {self.args.duration} --seed {self.args.seed}"
            f"{' --include-known-bugs' if self.args.include_known_bugs else ''})")
        log(f"kinds: {', '.join(self.kinds + self.kinds_up_front)}; workdir {self.workdir}")
        log("running: " + " ".join(cmd))
        self.events_file = open(os.path.join(self.workdir, "events.jsonl"), "wb")
        self.stderr_file = open(os.path.join(self.workdir, "dry-run.log"), "w")
        self.t0 = time.monotonic()
        # Whoever runs the soak may have RANKVISOR_* settings of their own: the job is the manifest's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RANKVISOR_")}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.workdir,
                                     start_new_session=True, env=env)
        threading.Thread(target=self.read_stdout, daemon=True).start()
        threading.Thread(target=self.read_stderr, daemon=True).start()

    def read_stdout(self):
        for raw in self.proc.stdout:
            now = time.monotonic()
            try:
                ev = json.loads(raw)
            except ValueError:
                self.violate(f"stdout line is not JSON: {raw[:200]!r}")
                continue
            with self.lines_lock:
                self.lines.append((now, ev))
            self.events_file.write(raw)
            self.events_file.flush()

    def read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            now = time.monotonic()
            self.notes.append((now, line))
            self.stderr_file.write(f"{now - self.t0:9.3f} {line}\n")
            self.stderr_file.flush()
            m = re.match(r"dry-run: (\S+) serves http://127\.0\.0\.1:(\d+)/", line)
            if m:
                self.http_ports[pod_replica(m.group(1))] = int(m.group(2))
            m = re.search(r"MASTER_PORT=(\d+)\)", line)
            if m and line.startswith("dry-run:"):
                self.master_port = int(m.group(1))
            if self.args.verbose or line.startswith("dry-run:"):
                print(f"  | {line}", flush=True)

    # -- bookkeeping

    def violate(self, msg):
        self.violations.append(msg)
        log(f"VIOLATION: {msg}")
        self.stderr_file.write(f"{self.elapsed():9.3f} chaos VIOLATION: {msg}\n")

    def fault_note(self, msg):
        """A fault, logged on our stdout and in the dry run's log at its time."""
        log(msg)
        self.stderr_file.write(f"{self.elapsed():9.3f} chaos {msg}\n")

    def elapsed(self):
        return time.monotonic() - self.t0

    def rows_since(self, t, replica=None):
        with self.lines_lock:
            return [ev for (at, ev) in self.lines if at >= t and ev.get("kind") == "Pod"
                    and (replica is None or ev.get("fields", {}).get("replica") == replica)]

    def exit_accounted(self, at, replica):
        """A launcher of `replica`, alive at `at`, is gone: the output accounts for it when a row of
        its pod was printed since (Error, Completed, Terminating, DELETED, a recreated pod), or when
        the pod's latest row already shows its container ended (a child that exited 0 is printed
        Completed before its launcher exits; the launcher's exit then changes no column)."""
        if self.rows_since(at, replica):
            return True
        rows = self.rows_since(0, replica)
        return bool(rows) and (rows[-1].get("type") == "DELETED" or rows[-1]["fields"].get("status") in ("Completed", "Error"))

    def scan_launchers(self):
        """Launchers are the dry run's children; each names its pod in POD_NAME."""
        current = {}
        for pid in children(self.proc.pid):
            if pid in self.launchers:
                current[pid] = self.launchers[pid]
                continue
            replica = pod_replica(environ(pid).get("POD_NAME"))
            if replica:
                current[pid] = replica
        for pid, replica in self.launchers.items():
            if pid not in current:
                # It was alive at the previous scan: rows printed since then may account for it.
                self.exited_launchers.append((self.last_scan_at, replica, pid))
        self.launchers = current
        self.last_scan_at = time.monotonic()
        return current

    def training_child(self, launcher_pid):
        kids = [c for c in children(launcher_pid) if proc_state(c) not in (None, "Z")]
        return kids[0] if kids else None

    # -- checks

    def check(self, final=False):
        if not final and self.proc.poll() is not None:
            if self.elapsed() < self.args.duration - self.args.tail:
                self.violate(f"the dry run exited early ({self.proc.returncode}) at {self.elapsed():.0f}s")
                raise Violation("dry run gone")
            return
        self.checks["alive"] += 1
        tree = [self.proc.pid] + descendants(self.proc.pid)
        # A zombie is a process its parent has not reaped yet. One whose parent we stopped
        # (a hung child's `sleep`) cannot be reaped until the SIGCONT; any other must be gone
        # within ZOMBIE_GRACE_S, or its parent does not reap.
        now = time.monotonic()
        zombies = {p for p in tree if proc_state(p) == "Z" and proc_state(self.parent(p)) != "T"}
        for p in list(self.zombie_since):
            if p not in zombies:
                del self.zombie_since[p]
        bad = []
        for p in zombies:
            first = self.zombie_since.setdefault(p, now)
            if now - first > ZOMBIE_GRACE_S and p not in self.zombies_reported:
                self.zombies_reported.add(p)
                bad.append(p)
        if bad:
            self.violate("zombie(s) below the dry run for over "
                         f"{ZOMBIE_GRACE_S}s: " + ", ".join(f"{p} (parent {self.parent(p)}: {self.role(self.parent(p))})" for p in bad))
        else:
            self.checks["no-zombie"] += 1
        launchers = self.scan_launchers()
        # Held connections (a flood, a silent peer) legitimately hold fds in the launchers: measure
        # them only when nothing is held, 2 s after the last release.
        quiet = not self.held_sockets and time.monotonic() - self.quiet_since > 2
        for key, pid in [("dry-run", self.proc.pid)] + [(f"launcher {r}", p) for p, r in launchers.items()]:
            if key != "dry-run" and (proc_state(pid) == "T" or not quiet):
                continue  # stopped by us (it cannot close its sockets now) or holding our connections
            fds, rss = fd_count(pid), rss_bytes(pid)
            if fds is None or rss is None:
                continue
            peak = self.peak[key]
            peak[0], peak[1] = max(peak[0], fds), max(peak[1], rss)
            if self.elapsed() < 60:
                base = self.baseline.setdefault(key, [0, 0])
                base[0], base[1] = max(base[0], fds), max(base[1], rss)
                continue
            base = self.baseline.get(key)
            if base is None:
                continue
            if fds > max(2 * base[0], base[0] + 8):
                self.violate(f"{key} (pid {pid}) has {fds} fds, first-minute peak {base[0]}")
            elif rss > base[1] + 100 * MIB:
                self.violate(f"{key} (pid {pid}) RSS {rss // MIB} MiB, first-minute peak {base[1] // MIB} MiB")
            else:
                self.checks["bounded-fd-rss"] += 1
        now = time.monotonic()
        # Every launcher seen to exit is accounted for: a row of its pod printed after its exit.
        for (at, replica, pid) in list(self.exited_launchers):
            if self.exit_accounted(at, replica):
                self.exited_launchers.remove((at, replica, pid))
                self.checks["launcher-exit-accounted"] += 1
            elif now - at > 15:
                self.exited_launchers.remove((at, replica, pid))
                self.violate(f"launcher {pid} of {replica} exited {now - at:.0f}s ago and no row of its pod was printed since")
        self.check_master_hangs()
        self.check_resumed()
        self.check_kills()
        for (at, replica) in list(self.crashes):
            if self.rows_since(at, replica):
                self.crashes.remove((at, replica))
                self.checks["crash-printed"] += 1
            elif now - at > 15:
                self.crashes.remove((at, replica))
                self.violate(f"{replica}'s child was killed {now - at:.0f}s ago and no row of its pod was printed since")

    def check_kills(self, final=False):
        """A launcher killed outright: once a row of its pod shows the container's end (Error,
        CrashLoopBackOff or DELETED), its training child is gone (the dry run reports the end only
        after the PID namespace's emulated teardown), and in any case within KILL_TEARDOWN_S; and
        under OnFailure a new launcher runs in its pod within KILL_RESTART_S (unless the job ended)."""
        now = time.monotonic()
        for kill in list(self.kills):
            at, replica, pid = kill["at"], kill["replica"], kill["pid"]
            child = kill["child"]
            if child is not None:
                ended = [ev for ev in self.rows_since(at, replica)
                         if ev.get("type") == "DELETED" or ev["fields"].get("status") in ("Error", "CrashLoopBackOff")]
                if ended or now - at > KILL_TEARDOWN_S or final:
                    state = proc_state(child)
                    # Gone, or a zombie not ours (its pid reused meanwhile is not ours either).
                    if state is None or (state == "Z" and self.parent(child) != self.proc.pid):
                        self.checks["kill-teardown"] += 1
                    else:
                        why = "once the row of its container's end is printed" if ended else f"{now - at:.0f}s after the kill"
                        self.violate(f"the training child {child} of {replica}'s killed launcher {pid} is still there "
                                     f"(state {state}, parent {self.parent(child)}) {why}: {cmdline(child)!r}")
                    kill["child"] = None
            if kill["child"] is not None:
                continue
            if any(r == replica and p != pid for p, r in self.launchers.items()):
                self.kills.remove(kill)
                self.checks["kill-restarted"] += 1
            elif now - at > KILL_RESTART_S or final:
                self.kills.remove(kill)
                if not final and self.proc.poll() is None:
                    self.violate(f"{replica}'s launcher {pid} was killed {now - at:.0f}s ago and no new launcher runs in its pod")

    def role(self, pid):
        if pid == self.proc.pid:
            return "the dry run"
        if pid in self.launchers:
            return f"launcher of {self.launchers[pid]}"
        for l, r in self.launchers.items():
            if pid in children(l):
                return f"training child of {r}"
        return "?"

    def check_resumed(self):
        """A launcher SIGCONTed after a SIGSTOP serves its HTTP endpoint again (within 10 s)."""
        now = time.monotonic()
        for item in list(self.resumed):
            at, replica, pid = item
            port = self.http_ports.get(replica)
            if port is None or pid not in self.launchers:
                self.resumed.remove(item)  # deleted meanwhile: nothing to ask
                continue
            if http_answers(port, "/healthz"):
                self.resumed.remove(item)
                self.checks["launcher-answers-after-sigcont"] += 1
            elif now - at > 10:
                self.resumed.remove(item)
                self.violate(f"launcher {replica} (pid {pid}) does not answer /healthz on :{port} {now - at:.0f}s after its SIGCONT")

    def check_master_hangs(self, final=False):
        """A stopped master child stops beating its own heartbeat file: after --hang-timeout its
        launcher stops it (TERM, then KILL after the grace period) and restarts it, which prints a
        row of master-0."""
        now = time.monotonic()
        for at in list(self.master_hangs):
            if self.rows_since(at, "master-0"):
                self.master_hangs.remove(at)
                self.checks["master-hang-caught"] += 1
            elif now - at > HANG_TIMEOUT_S + 5 + 15 or final:
                self.master_hangs.remove(at)
                if self.proc.returncode is not None and at > time.monotonic() - HANG_TIMEOUT_S - 5:
                    continue  # the job ended before the hang timeout could run out
                self.violate(f"master-0's child was stopped {now - at:.0f}s ago and its launcher did not act (no row of master-0)")

    def parent(self, pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
            return int(s[s.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            return None

    # -- faults

    def pick_launcher(self):
        launchers = [(p, r) for p, r in self.scan_launchers().items() if proc_state(p) not in ("T", "Z", None)]
        return self.rng.choice(sorted(launchers)) if launchers else (None, None)

    def fault(self, kind):
        if kind == "launcher-stop":
            pid, replica = self.pick_launcher()
            if pid is None:
                return False
            hold = self.rng.uniform(2, 6)
            os.kill(pid, signal.SIGSTOP)
            self.pending_cont.append((time.monotonic() + hold, pid, f"launcher {replica}"))
            self.stopped_launchers[pid] = replica
            self.fault_note(f"fault launcher-stop: SIGSTOP launcher {replica} (pid {pid}) for {hold:.1f}s")
        elif kind == "launcher-kill":
            pid, replica = self.pick_launcher()
            if pid is None:
                return False
            child = self.training_child(pid)
            at = time.monotonic()  # before the signal, as for a child crash
            os.kill(pid, signal.SIGKILL)
            self.kills.append({"at": at, "replica": replica, "pid": pid, "child": child})
            self.hung = {c: v for c, v in self.hung.items() if v[1] != pid}
            self.fault_note(f"fault launcher-kill: SIGKILL launcher {replica} (pid {pid}, training child {child})")
        elif kind in ("child-crash", "child-hang"):
            pairs = []
            for pid, replica in sorted(self.scan_launchers().items()):
                child = self.training_child(pid)
                if child and child not in self.hung and proc_state(child) != "T":
                    pairs.append((child, replica, pid))
            if not pairs:
                return False
            child, replica, launcher = self.rng.choice(pairs)
            if kind == "child-crash":
                # The time is taken before the signal: the dry run may print the rows before this
                # thread runs again, and they count.
                at = time.monotonic()
                os.kill(child, signal.SIGKILL)
                self.crashes.append((at, replica))
                self.fault_note(f"fault child-crash: SIGKILL {replica}'s child (pid {child})")
            else:
                os.kill(child, signal.SIGSTOP)
                self.hung[child] = (replica, launcher)
                if replica == "master-0":
                    self.master_hangs.append(time.monotonic())
                # Past the hang timeout (+ the check period) the master's launcher has killed it;
                # a worker's is hidden by its peers' beats: let it go on.
                self.pending_cont.append((time.monotonic() + HANG_TIMEOUT_S + 8, child, f"child of {replica}"))
                self.fault_note(f"fault child-hang: SIGSTOP {replica}'s child (pid {child})")
        elif kind == "hostile-peer":
            return self.hostile_peer()
        elif kind == "http-flood":
            return self.http_flood()
        else:
            raise ValueError(kind)
        return True

    def hostile_peer(self):
        if self.master_port is None:
            return False
        port = self.master_port + 1
        variant = self.rng.choice(["garbage", "hello-wrong-job", "hello-bad-index", "hello-bad-count",
                                   "hello-bad-version", "hello-impersonate", "long-line", "silent"])
        hello = {"v": 1, "type": "hello", "job": "chaos", "replica_index": 3, "replica_count": 8,
                 "node": "evil\n[rankvisor] ERROR forged", "healthy": True, "health": {}, "nonce": "00"}
        if variant == "hello-wrong-job":
            hello["job"] = "not-chaos"
        elif variant == "hello-bad-index":
            hello["replica_index"] = self.rng.choice([8, 99, 2 ** 32 - 1])
        elif variant == "hello-bad-count":
            hello["replica_count"] = self.rng.choice([0, 7, 9, 100000])
            hello["replica_index"] = 0
        elif variant == "hello-bad-version":
            hello["v"] = 999
        elif variant == "hello-impersonate":
            # A live worker's identity, without the job token's proof: refused, the worker unharmed.
            hello["replica_index"] = self.rng.randint(1, 7)
            hello["node"] = "localhost"
        payload = {
            "garbage": bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 4096))),
            "long-line": b"{" + b"a" * (1024 * 1024),
            "silent": b"",
        }.get(variant, json.dumps(hello).encode() + b"\n")
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
            s.settimeout(3)
            if payload:
                try:
                    s.sendall(payload)
                except OSError:
                    pass  # refused midway: fine
            self.held_sockets.append((time.monotonic() + self.rng.uniform(5, 20), s))
        except OSError as e:
            self.fault_note(f"fault hostile-peer: cannot connect to {port}: {e}")
        self.fault_note(f"fault hostile-peer: {variant} on the rendezvous port {port}")
        return True

    def http_flood(self):
        if not self.http_ports:
            return False
        replica, port = self.rng.choice(sorted(self.http_ports.items()))
        n = self.rng.randint(40, 120)
        opened = 0
        paths = ["/status", "/metrics", "/healthz", "/readyz", "/job", "/nope"]
        full = []
        for i in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue
            opened += 1
            s.settimeout(2)
            try:
                if i % 2:
                    # slow: a partial request line and header, then held
                    s.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * self.rng.randint(1, 8000))
                    self.held_sockets.append((time.monotonic() + self.rng.uniform(3, 15), s))
                else:
                    s.sendall(f"GET {self.rng.choice(paths)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                    full.append(s)
            except OSError:
                s.close()
        answered = 0
        deadline = time.monotonic() + 5
        for s in full:
            try:
                s.settimeout(max(0.05, deadline - time.monotonic()))
                if s.recv(64).startswith(b"HTTP/1."):
                    answered += 1
            except OSError:
                pass
            s.close()
        self.flood_answers["sent"] += len(full)
        self.flood_answers["answered"] += answered
        self.fault_note(f"fault http-flood: {opened}/{n} connections to :{port} ({replica}), {answered}/{len(full)} full requests answered")
        return True

    def housekeeping(self):
        now = time.monotonic()
        for item in list(self.pending_cont):
            due, pid, what = item
            if due <= now:
                self.pending_cont.remove(item)
                try:
                    os.kill(pid, signal.SIGCONT)
                    self.stderr_file.write(f"{self.elapsed():9.3f} chaos SIGCONT {what} (pid {pid})\n")
                except ProcessLookupError:
                    pass  # killed meanwhile (a hung master child, by its launcher)
                self.hung.pop(pid, None)
                if pid in self.stopped_launchers:
                    self.resumed.append((now, self.stopped_launchers.pop(pid), pid))
                # A launcher forwards the SIGCONT it receives to its child's process group (as
                # dumb-init does): a child we stopped runs again, its hang is over.
                for child, (replica, launcher) in list(self.hung.items()):
                    if launcher == pid:
                        del self.hung[child]
                        if replica == "master-0" and self.master_hangs:
                            self.master_hangs.clear()
                            self.checks["hang-ended-by-forwarded-sigcont"] += 1
                            self.stderr_file.write(f"{self.elapsed():9.3f} chaos the master child's hang ends: its launcher forwards SIGCONT\n")
        for item in list(self.held_sockets):
            if item[0] <= now:
                self.held_sockets.remove(item)
                item[1].close()
                self.quiet_since = now

    def release_all(self):
        for (_, pid, _) in self.pending_cont:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.pending_cont.clear()
        for (_, s) in self.held_sockets:
            s.close()
        self.held_sockets.clear()

    # -- main loop

    def run(self):
        self.prepare()
        self.start()
        try:
            self.loop()
        except Violation:
            pass
        finally:
            self.release_all()
        self.finish()
        return self.report()

    def loop(self):
        d = self.args.duration
        next_fault = self.t0 + 10  # let the barrier complete first
        while self.elapsed() < d - self.args.tail:
            time.sleep(1)
            self.housekeeping()
            self.check()
            if time.monotonic() >= next_fault:
                kind = self.next_kind()
                if kind and self.fault(kind):
                    self.faults[kind] += 1
                    time.sleep(0.5)
                    self.check()
                next_fault = time.monotonic() + self.rng.uniform(self.args.interval / 2, self.args.interval * 1.5)
            # Still printing: a row (or a note) within the last 60 s while faults land.
            last = max([at for at, _ in self.lines[-1:]] + [at for at, _ in self.notes[-1:]] + [self.t0])
            if time.monotonic() - last > 60 and self.faults:
                self.violate(f"nothing printed for {time.monotonic() - last:.0f}s")
                raise Violation("silent")

    def next_kind(self):
        """The next fault kind, drawn from a shuffled bag holding each kind once (refilled when
        empty): random order, but every kind comes up in every round of len(kinds) faults."""
        if not self.kinds:
            return None
        if not self.bag:
            self.bag = list(self.kinds)
            self.rng.shuffle(self.bag)
        return self.bag.pop()

    def finish(self):
        log(f"faults stop at {self.elapsed():.0f}s; waiting for the job to end (children end at the soak's end)")
        deadline = time.monotonic() + self.args.tail + 90
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            self.housekeeping()
            self.check(final=True)
        if self.proc.poll() is None:
            self.violate("the dry run did not end within 90 s after the soak's end: sending TERM")
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        time.sleep(1)  # let the reader threads drain
        self.check_exits_accounted_final()
        self.check_master_hangs(final=True)
        self.check_kills(final=True)
        code = self.proc.returncode
        jobs = [ev for _, ev in self.lines if ev.get("kind") == "PyTorchJob"]
        state = jobs[-1]["fields"].get("state") if jobs else None
        want, why = expected_outcome(self.faults)
        want_code = 0 if want == "Succeeded" else 1
        self.final = (state, code, want, why)
        if state != want or code != want_code:
            self.violate(f"job ended {state} (exit {code}); the operator's rules say {want} (exit {want_code}): {why}")
        else:
            self.checks["final-state"] += 1
        self.check_leftovers()

    def check_exits_accounted_final(self):
        now = time.monotonic()
        for (at, replica, pid) in self.exited_launchers:
            if self.exit_accounted(at, replica):
                self.checks["launcher-exit-accounted"] += 1
            else:
                self.violate(f"launcher {pid} of {replica} exited and no row of its pod was printed after ({now - at:.0f}s)")
        self.exited_launchers.clear()

    def check_leftovers(self):
        """No process of this run is left: every launcher and child has the run's directory in its env."""
        time.sleep(1)
        mine = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != os.getpid():
                env = environ(int(name))
                if any(self.workdir in v for v in env.values()) and proc_state(int(name)) is not None:
                    mine.append(int(name))
        if mine:
            self.violate("processes of the run left after the dry run ended: " + "; ".join(
                f"{p} (parent {self.parent(p)}, POD_NAME={environ(p).get('POD_NAME', '?')}, {cmdline(p)!r})" for p in mine))
            for p in mine:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        else:
            self.checks["no-leftover"] += 1

    def report(self):
        fd_rss = []
        for key in ["dry-run"] + sorted(k for k in self.peak if k != "dry-run"):
            base = self.baseline.get(key, [0, 0])
            peak = self.peak[key]
            fd_rss.append(f"{key}: fds {base[0]}->{peak[0]}, RSS {base[1] / MIB:.1f}->{peak[1] / MIB:.1f} MiB")
        state, code, want, why = getattr(self, "final", (None, None, None, None))
        print("---- chaos soak summary ----")
        print("first-minute peak -> whole-run peak: " + "; ".join(fd_rss))
        print(f"seed {self.args.seed}, duration {self.args.duration}s, {self.elapsed():.0f}s elapsed")
        print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) + f" (total {sum(self.faults.values())})")
        print("checks passed: " + ", ".join(f"{k} {v}" for k, v in sorted(self.checks.items())) + f" (total {sum(self.checks.values())})")
        print(f"http flood: {self.flood_answers['answered']}/{self.flood_answers['sent']} full requests answered within 5 s")
        print(f"job: {state} (exit {code}); expected {want}: {why}")
        if self.violations:
            print(f"VIOLATIONS ({len(self.violations)}):")
            for v in self.violations:
                print(f"  - {v}")
            print(f"the dry run's output: {self.workdir}/events.jsonl, {self.workdir}/dry-run.log (faults and violations marked 'chaos')")
            print("chaos soak: FAILED")
            return 1
        shutil.rmtree(self.workdir, ignore_errors=True)
        print("chaos soak: OK, no violation")
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=int, default=600, help="seconds the job runs (default 600)")
    p.add_argument("--seed", type=int, default=None, help="RNG seed (default: random, printed)")
    p.add_argument("--interval", type=float, default=4.0, help="mean seconds between faults (default 4)")
    p.add_argument("--tail", type=int, default=15, help="no fault in the last N seconds (default 15)")
    p.add_argument("--binary", default=os.environ.get("RANKVISOR_BIN", os.path.join(REPO, "target/debug/rankvisor")))
    p.add_argument("--manifest", default=os.path.join(REPO, "examples/chaos-job.yaml"))
    p.add_argument("--include-known-bugs", action="store_true",
                   help="also inject the fault classes of known bugs: " + "; ".join(f"{k}: {v}" for k, v in KNOWN_BUG_KINDS.items()))
    p.add_argument("--only", help="comma-separated fault kinds to apply (default: all but known bugs)")
    p.add_argument("--verbose", action="store_true", help="echo every line the replicas print")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2 ** 32)
    if args.duration < 60:
        p.error("--duration must be at least 60 (the first minute is the fd/RSS baseline)")
    known = set(DEFAULT_KINDS) | set(UP_FRONT_KINDS) | set(KNOWN_BUG_KINDS)
    if args.only and not set(args.only.split(",")) <= known:
        p.error(f"--only {args.only!r}: unknown kind(s) {sorted(set(args.only.split(',')) - known)}; expected some of {sorted(known)}")
    if not os.access(args.binary, os.X_OK):
        p.error(f"--binary {args.binary!r} is not an executable (build it: cargo build)")
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()
