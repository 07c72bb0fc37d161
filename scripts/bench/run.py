#!/usr/bin/env python3
"""Benchmarks of rankvisor's core supervisor, side by side with tini and a bare process.

Called by scripts/bench.sh, which builds rankvisor, installs tini and compiles the probes. Prints
figures and targets; it never fails on a figure (machines differ), only on a broken run.

Clocks: every timestamp that is compared across processes is CLOCK_MONOTONIC, read by the C probes
and by this driver (time.clock_gettime_ns), so the differences are exact to the kernel's clock.
"""

import argparse
import os
import platform
import select
import signal
import subprocess
import sys
import tempfile
import time

MONO = time.CLOCK_MONOTONIC
NULL_STDERR = (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)


def now_ns():
    return time.clock_gettime_ns(MONO)


def spawn(argv, actions=(), env=None):
    """Start argv with posix_spawn (cheap, no Python in the child); stderr goes to /dev/null."""
    return os.posix_spawn(argv[0], argv, env if env is not None else os.environ, file_actions=[NULL_STDERR, *actions])


def wait(pid):
    """Reap pid and return its shell-style exit status."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def percentile(xs, p):
    """Linear-interpolated percentile of a non-empty list, p in [0, 100]."""
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(xs):
    return percentile(xs, 50)


def proc_status(pid):
    """The memory fields of /proc/PID/status, in KiB, plus Threads."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "Threads"):
                out[key] = int(val.split()[0])
    return out


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class LineReader:
    """Lines from a descriptor, with a timeout so a broken supervisor fails the run instead of hanging it."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def line(self, timeout, what):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise SystemExit(f"bench: timed out after {timeout}s waiting for {what}")
            chunk = os.read(self.fd, 4096)
            if not chunk:
                raise SystemExit(f"bench: end of file while waiting for {what}")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()


class Report:
    """Collects the table: printed as it goes, written to a file at the end."""

    def __init__(self):
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    def table(self, header, rows):
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        fmt = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        self(fmt(header))
        self("  ".join("-" * w for w in widths))
        for r in rows:
            self(fmt(r))


def verdict(ok):
    return "ok" if ok else "MISS"


def us(ns):
    return f"{ns / 1000:.0f}"


def us1(ns):
    return f"{ns / 1000:.1f}"


# 1. Launch + exit ------------------------------------------------------------------------------


def bench_launch(rep, a):
    variants = [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--", "/bin/true"]),
        ("tini -s", [a.tini, "-s", "--", "/bin/true"]),
        ("bare /bin/true", ["/bin/true"]),
    ]
    samples = {name: [] for name, _ in variants}
    rounds = {name: [] for name, _ in variants}
    for _, argv in variants:
        for _ in range(5):
            wait(spawn(argv))
    for r in range(a.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for name, argv in order:
            batch = []
            for _ in range(a.batch):
                t0 = time.perf_counter_ns()
                code = wait(spawn(argv))
                batch.append(time.perf_counter_ns() - t0)
                if code != 0:
                    raise SystemExit(f"bench: {name} exited {code}, expected 0")
            samples[name].extend(batch)
            rounds[name].append(median(batch))
    n = a.rounds * a.batch
    bare = median(samples["bare /bin/true"])
    rep(f"1. Launch + exit of /bin/true, {n} times each ({a.rounds} interleaved rounds of {a.batch}); microseconds")
    rows = []
    for name, _ in variants:
        s = samples[name]
        rows.append(
            [name, f"{sum(s) / 1e6:.1f}", us(median(s)), us(percentile(s, 90)), us(min(s)), us(median(s) - bare)]
        )
    rep.table(["", "total ms", "median", "p90", "min", "over bare"], rows)
    ratio = median(samples["rankvisor"]) / median(samples["tini -s"])
    per_round = [rv / ti for rv, ti in zip(rounds["rankvisor"], rounds["tini -s"])]
    rep(
        f"   rankvisor/tini (median per launch): {ratio:.2f}  [per round {min(per_round):.2f}..{max(per_round):.2f}]"
        f"  target <= 1.00: {verdict(ratio <= 1.0)}"
    )
    rep()
    bench_launch_breakdown(rep, a)


def bench_launch_breakdown(rep, a):
    """Where a launch spends its time: supervisor start -> child's main(), child's exit -> supervisor reaped."""
    probe = os.path.join(a.probes, "stamp_probe")
    variants = [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--", probe, "-"]),
        ("tini -s", [a.tini, "-s", "--", probe, "-"]),
        ("bare probe", [probe, "-"]),
    ]
    per = 60
    res = {name: ([], []) for name, _ in variants}
    for r in range(per // 20):
        for name, argv in variants[r % 3 :] + variants[: r % 3]:
            for _ in range(20):
                rd, wr = os.pipe()
                t0 = now_ns()
                pid = spawn(argv, [(os.POSIX_SPAWN_DUP2, wr, 1)])
                os.close(wr)
                code = wait(pid)
                t3 = now_ns()
                line = os.read(rd, 4096).decode().split()
                os.close(rd)
                if code != 0 or len(line) != 3:
                    raise SystemExit(f"bench: {name} exited {code} with probe output {line!r}")
                start, end = int(line[1]), int(line[2])
                res[name][0].append(start - t0)
                res[name][1].append(t3 - end)
    rep(f"   Breakdown ({per} launches each of a probe that stamps its main() and its exit; medians, microseconds)")
    b_up, b_down = (median(x) for x in res["bare probe"])
    rows = []
    for name, _ in variants:
        up, down = (median(x) for x in res[name])
        rows.append([name, us(up), us(up - b_up), us(down), us(down - b_down)])
    rep.table(["", "spawn->child main", "over bare", "child exit->reaped", "over bare"], rows)
    rep()


# 2. Memory -------------------------------------------------------------------------------------


def bench_rss(rep, a):
    variants = [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--", "sleep", "2"], []),
        (
            "rankvisor --status-fd",
            [a.rankvisor, "--restart-policy", "Never", "--status-fd", "3", "--", "sleep", "2"],
            [(os.POSIX_SPAWN_OPEN, 3, "/dev/null", os.O_WRONLY, 0)],
        ),
        ("tini -s", [a.tini, "-s", "--", "sleep", "2"], []),
    ]
    # Side by side: memory does not depend on what else runs, and this keeps the bench short.
    pids = [(name, spawn(argv, actions)) for name, argv, actions in variants]
    time.sleep(1.0)
    stats = [(name, pid, proc_status(pid), fd_count(pid)) for name, pid in pids]
    for name, pid in pids:
        code = wait(pid)
        if code != 0:
            raise SystemExit(f"bench: {name} exited {code}, expected 0")
    rep("2. Memory of the supervisor while it supervises `sleep 2` (KiB, read from /proc/PID/status at 1 s)")
    rows = [
        [name, s["VmHWM"], s["VmRSS"], s["RssAnon"], s["RssFile"], s["Threads"], fds] for name, _, s, fds in stats
    ]
    rep.table(["", "VmHWM (peak)", "VmRSS", "RssAnon", "RssFile", "threads", "fds"], rows)
    peak = stats[0][2]["VmHWM"]
    rep(f"   rankvisor peak RSS {peak / 1024:.2f} MiB, target <= 4 MiB: {verdict(peak <= 4096)}")
    rep()


# 3. TERM latency -------------------------------------------------------------------------------


def term_sample(a, argv, fifo):
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # never blocks, never sees EOF: the timeout catches a missing probe
    try:
        pid = spawn(argv + [os.path.join(a.probes, "term_probe"), fifo])
        r = LineReader(fd)
        if r.line(10, f"{argv[0]}'s child to be ready") != "ready":
            raise SystemExit("bench: term_probe did not say ready")
        time.sleep(0.02)  # let the supervisor's loop go idle, as it is in a long training run
        sent = now_ns()
        os.kill(pid, signal.SIGTERM)
        handled = int(r.line(10, "the probe's TERM timestamp"))
        code = wait(pid)
        exited = now_ns()
        if code not in (0, 143):
            raise SystemExit(f"bench: {argv[0]} exited {code} after TERM, expected 0")
        return handled - sent, exited - sent
    finally:
        os.close(fd)
        os.unlink(fifo)


def bench_term(rep, a, tmp):
    variants = [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--"]),
        ("tini -s", [a.tini, "-s", "--"]),
    ]
    res = {name: ([], []) for name, _ in variants}
    fifo = os.path.join(tmp, "term.fifo")
    for i in range(a.term_samples):
        for name, argv in variants if i % 2 == 0 else variants[::-1]:
            delay, down = term_sample(a, argv, fifo)
            res[name][0].append(delay)
            res[name][1].append(down)
    rep(f"3. TERM sent to the supervisor -> the child's TERM handler runs ({a.term_samples} samples each; microseconds)")
    rows = []
    for name, _ in variants:
        d, down = res[name]
        rows.append([name, us1(median(d)), us1(percentile(d, 90)), us1(min(d)), us1(max(d)), us(median(down))])
    rep.table(["", "median", "p90", "min", "max", "TERM->supervisor exited (median)"], rows)
    m = median(res["rankvisor"][0])
    rep(f"   rankvisor median {m / 1e6:.3f} ms, target < 1 ms: {verdict(m < 1e6)}")
    rep()


# 4. Restarts -----------------------------------------------------------------------------------


def restart_run(a, tmp, extra, actions, tag):
    """rankvisor restarting stamp_probe a.restarts times with zero backoff; returns gaps and samples."""
    n = a.restarts
    out = os.path.join(tmp, f"restarts-{tag}.txt")
    fifo = os.path.join(tmp, f"hold-{tag}.fifo")
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)
    holds = [0, 10, n]
    argv = [
        a.rankvisor,
        "--restart-policy",
        "Always",
        "--backoff-initial",
        "0",
        "--backoff-limit",
        str(n),
        *extra,
        "--",
        os.path.join(a.probes, "stamp_probe"),
        out,
        fifo,
        *map(str, holds),
    ]
    samples = {}
    try:
        t0 = now_ns()
        pid = spawn(argv, actions)
        r = LineReader(fd)
        for want in holds:
            word, count, child = r.line(60, f"the probe to hold at restart {want}").split()
            if word != "hold" or int(count) != want:
                raise SystemExit(f"bench: expected hold {want}, got {word} {count}")
            samples[want] = (fd_count(pid), proc_status(pid))
            os.kill(int(child), signal.SIGUSR1)
        code = wait(pid)
        wall = now_ns() - t0
    finally:
        os.close(fd)
        os.unlink(fifo)
    if code != 0:
        raise SystemExit(f"bench: rankvisor exited {code} after {n} restarts, expected 0")
    runs = {}
    with open(out) as f:
        for line in f:
            c, s, e = map(int, line.split())
            runs[c] = (s, e)
    if sorted(runs) != list(range(n + 1)):
        raise SystemExit(f"bench: expected children 0..{n}, got {len(runs)} lines")
    gaps = [runs[c + 1][0] - runs[c][1] for c in range(n)]
    return gaps, samples, wall


def reference_gaps(a, tmp, n=200):
    """The same probe restarted by the smallest possible supervisor: a posix_spawn + waitpid loop."""
    out = os.path.join(tmp, "restarts-reference.txt")
    probe = os.path.join(a.probes, "stamp_probe")
    env = dict(os.environ)
    for c in range(n + 1):
        env["RANKVISOR_RESTART_COUNT"] = str(c)
        wait(spawn([probe, out], env=env))
    runs = {}
    with open(out) as f:
        for line in f:
            c, s, e = map(int, line.split())
            runs[c] = (s, e)
    return [runs[c + 1][0] - runs[c][1] for c in range(n)]


def bench_restart(rep, a, tmp):
    n = a.restarts
    runs = [
        ("rankvisor", restart_run(a, tmp, [], [], "plain")),
        (
            "rankvisor --status-fd",
            restart_run(a, tmp, ["--status-fd", "3"], [(os.POSIX_SPAWN_OPEN, 3, "/dev/null", os.O_WRONLY, 0)], "sfd"),
        ),
    ]
    ref = reference_gaps(a, tmp)
    rep(f"4. Restart latency: child's last instruction -> next child's main(), zero backoff (microseconds)")
    rows = []
    for name, (gaps, _, wall) in runs:
        rows.append(
            [
                name,
                len(gaps),
                us(median(gaps)),
                us(percentile(gaps, 90)),
                us(percentile(gaps, 99)),
                us(max(gaps)),
                f"{(n + 1) / (wall / 1e9):.0f}",
            ]
        )
    rows.append(
        [
            "reference: python spawn+wait loop",
            len(ref),
            us(median(ref)),
            us(percentile(ref, 90)),
            us(percentile(ref, 99)),
            us(max(ref)),
            "",
        ]
    )
    rep.table(["", "restarts", "median", "p90", "p99", "max", "children/s"], rows)
    m = median(runs[0][1][0])
    rep(f"   rankvisor median {m / 1e6:.3f} ms, target < 5 ms: {verdict(m < 5e6)}")
    rep()
    rep(f"   rankvisor itself across the {n} restarts (sampled while child #0, #10 and #{n} run)")
    rows = []
    for name, (_, samples, _) in runs:
        for at, (fds, st) in sorted(samples.items()):
            rows.append([f"{name} @ restart {at}", fds, st["VmRSS"], st["RssAnon"], st["VmHWM"], st["Threads"]])
    rep.table(["", "open fds", "VmRSS KiB", "RssAnon KiB", "VmHWM KiB", "threads"], rows)
    for name, (_, samples, _) in runs:
        (f10, s10), (fn, sn) = samples[10], samples[n]
        grew = fn > f10 or sn["VmRSS"] - s10["VmRSS"] > 64
        rep(
            f"   {name}: fds {f10} -> {fn}, RSS {s10['VmRSS']} -> {sn['VmRSS']} KiB from restart 10 to {n}"
            f" (no growth expected): {verdict(not grew)}"
        )
    rep()


def header(rep, a):
    def version(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"

    nproc = sum(1 for d in os.listdir("/proc") if d.isdigit())
    rep("rankvisor core benchmarks")
    rep(f"  date      {time.strftime('%Y-%m-%d %H:%M:%S %z')}")
    rep(f"  machine   {platform.machine()}, {os.cpu_count()} cpus, Linux {platform.release()}, load {os.getloadavg()[0]:.2f}")
    rep(f"  rankvisor {version([a.rankvisor, '--version'])}, {os.path.getsize(a.rankvisor) / 1024:.0f} KiB ({a.rankvisor})")
    rep(f"  tini      {version([a.tini, '--version'])} ({a.tini})")
    rep(f"  /proc     {nproc} processes visible (rankvisor scans them all before it exits)")
    rep("  Every supervisor runs with its stderr on /dev/null and default options unless shown.")
    rep()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rankvisor", required=True)
    p.add_argument("--tini", required=True)
    p.add_argument("--probes", required=True, help="directory holding term_probe and stamp_probe")
    p.add_argument("--out", required=True, help="where to write the table as well")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--term-samples", type=int, default=50)
    p.add_argument("--restarts", type=int, default=1000)
    a = p.parse_args()
    if a.restarts < 11:
        p.error("--restarts must be at least 11 (fds and RSS are sampled at restart 10 and at the last)")
    rep = Report()
    started = time.monotonic()
    header(rep, a)
    with tempfile.TemporaryDirectory(prefix="rankvisor-bench-") as tmp:
        bench_launch(rep, a)
        bench_rss(rep, a)
        bench_term(rep, a, tmp)
        bench_restart(rep, a, tmp)
    rep(f"(benchmarks took {time.monotonic() - started:.0f} s)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(rep.lines) + "\n")
    print(f"written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
