#!/usr/bin/env python3
"""Benchmarks of rankvisor's core supervisor, side by side with tini, tini-static and a bare process.

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


def spread(xs, f=us):
    """median [p10..p90] of a list, formatted."""
    return f"{f(median(xs))} [{f(percentile(xs, 10))}..{f(percentile(xs, 90))}]"


def launch_variants(a, tail):
    """The supervisors side by side, each running `tail` (argv); the bare program last."""
    also = [(label, [path, "--restart-policy", "Never", "--", *tail]) for label, path in a.also]
    return [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--", *tail]),
        *also,
        ("tini -s", [a.tini, "-s", "--", *tail]),
        ("tini-static -s", [a.tini_static, "-s", "--", *tail]),
        ("bare", list(tail)),
    ]


def bench_launch(rep, a):
    variants = launch_variants(a, ["/bin/true"])
    samples = {name: [] for name, _ in variants}
    faults = {name: [] for name, _ in variants}
    cpu = {name: [] for name, _ in variants}
    rounds = {name: [] for name, _ in variants}
    for _, argv in variants:
        for _ in range(5):
            wait(spawn(argv))
    for r in range(a.rounds):
        # A/B interleaved: each round runs every variant, starting with a different one.
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for name, argv in order:
            batch = []
            for _ in range(a.batch):
                t0 = time.perf_counter_ns()
                pid = spawn(argv)
                _, status, usage = os.wait4(pid, 0)
                batch.append(time.perf_counter_ns() - t0)
                code = os.waitstatus_to_exitcode(status)
                if code != 0:
                    raise SystemExit(f"bench: {name} exited {code}, expected 0")
                faults[name].append(usage.ru_minflt)
                cpu[name].append(int((usage.ru_utime + usage.ru_stime) * 1e9))
            samples[name].extend(batch)
            rounds[name].append(median(batch))
    n = a.rounds * a.batch
    bare = median(samples["bare"])
    rep(
        f"1. Launch + exit of /bin/true, {n} times each ({a.rounds} interleaved rounds of {a.batch});"
        " microseconds, median [p10..p90]; CPU time (user + system) and page faults of the supervisor and its"
        " child, from wait4 (less sensitive than wall time to other load on the cores)"
    )
    rows = []
    for name, _ in variants:
        s = samples[name]
        rows.append([name, spread(s), us(min(s)), us(median(s) - bare), spread(cpu[name]), f"{median(faults[name]):.0f}"])
    rep.table(["", "wall", "min", "over bare", "CPU", "minor faults"], rows)
    for ref in ("tini -s", "tini-static -s"):
        ratio = median(samples["rankvisor"]) / median(samples[ref])
        per_round = [rv / ti for rv, ti in zip(rounds["rankvisor"], rounds[ref])]
        line = (
            f"   rankvisor / {ref}: {ratio:.2f} (median per launch); per round median {median(per_round):.2f}"
            f" [p10..p90 {percentile(per_round, 10):.2f}..{percentile(per_round, 90):.2f}]"
        )
        if ref == "tini -s":
            line += f"  target <= 1.10 (within 10%): {verdict(ratio <= 1.1)}"
        rep(line)
    cpu_ratio = median(cpu["rankvisor"]) / median(cpu["tini -s"])
    rep(f"   rankvisor / tini -s in CPU time (median): {cpu_ratio:.2f}")
    rep()
    bench_launch_breakdown(rep, a)


def bench_launch_breakdown(rep, a):
    """Where a launch spends its time: supervisor start -> child's main(), child's exit -> supervisor reaped."""
    probe = os.path.join(a.probes, "stamp_probe")
    variants = launch_variants(a, [probe, "-"])
    per = 60
    res = {name: ([], []) for name, _ in variants}
    for r in range(per // 20):
        for name, argv in variants[r % len(variants) :] + variants[: r % len(variants)]:
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
    b_up, b_down = (median(x) for x in res["bare"])
    rows = []
    for name, _ in variants:
        up, down = (median(x) for x in res[name])
        rows.append([name, us(up), us(up - b_up), us(down), us(down - b_down)])
    rep.table(["", "spawn->child main", "over bare", "child exit->reaped", "over bare"], rows)
    rep()


# 2. Memory -------------------------------------------------------------------------------------


def smaps_rollup(pid):
    """Rss, Pss, Private_Clean, Private_Dirty, Anonymous of /proc/PID/smaps_rollup, in KiB."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Anonymous"):
                out[key] = int(val.split()[0])
    return out


def bench_rss(rep, a):
    variants = [
        ("rankvisor", [a.rankvisor, "--restart-policy", "Never", "--", "sleep", "1"]),
        *((label, [path, "--restart-policy", "Never", "--", "sleep", "1"]) for label, path in a.also),
        ("tini -s", [a.tini, "-s", "--", "sleep", "1"]),
        ("tini-static -s", [a.tini_static, "-s", "--", "sleep", "1"]),
    ]
    # A binary written moments ago (the build) has dirty page-cache pages, which smaps counts as
    # Private_Dirty of whoever maps them: write them back first.
    os.sync()
    keys = ["VmHWM", "VmRSS", "RssAnon", "RssFile", "Private_Dirty", "Private_Clean", "Pss", "Threads", "fds"]
    seen = {name: {k: [] for k in keys} for name, _ in variants}
    for _ in range(a.memory_rounds):
        # Side by side within a round: memory does not depend on what else runs.
        pids = [(name, spawn(argv)) for name, argv in variants]
        time.sleep(0.5)
        for name, pid in pids:
            st = {**proc_status(pid), **smaps_rollup(pid), "fds": fd_count(pid)}
            for k in keys:
                seen[name][k].append(st[k])
        for name, pid in pids:
            code = wait(pid)
            if code != 0:
                raise SystemExit(f"bench: {name} exited {code}, expected 0")
    rep(
        f"2. Memory of the supervisor while it supervises `sleep 1` (KiB, /proc/PID/status and smaps_rollup"
        f" at 0.5 s; median of {a.memory_rounds} runs, [min..max] when they differ)"
    )

    def cell(xs):
        lo, mid, hi = min(xs), median(xs), max(xs)
        return f"{mid:.0f}" if lo == hi else f"{mid:.0f} [{lo}..{hi}]"

    rows = [[name, *(cell(seen[name][k]) for k in keys)] for name, _ in variants]
    rep.table(["", "VmHWM (peak)", "VmRSS", "RssAnon", "RssFile", "Private_Dirty", "Private_Clean", "Pss", "threads", "fds"], rows)
    peak = median(seen["rankvisor"]["VmHWM"])
    anon = median(seen["rankvisor"]["RssAnon"])
    rep(f"   rankvisor peak RSS {peak / 1024:.2f} MiB, target <= 3 MiB: {verdict(peak <= 3072)}")
    rep(
        f"   rankvisor private anonymous memory (RssAnon) {anon / 1024:.2f} MiB, target <= 1 MiB:"
        f" {verdict(anon <= 1024)} (Private_Clean is the binary's own text pages: no other process maps them)"
    )
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
        ("tini-static -s", [a.tini_static, "-s", "--"]),
    ]
    res = {name: ([], []) for name, _ in variants}
    fifo = os.path.join(tmp, "term.fifo")
    for i in range(a.term_samples):
        for name, argv in variants[i % len(variants) :] + variants[: i % len(variants)]:
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
    """rankvisor restarting stamp_probe a.restarts times at the backoff floor (10 ms); returns gaps and samples."""
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
        "0s",
        "--backoff-max",
        "10ms",
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
    runs = read_runs(out)
    if sorted(runs) != list(range(n + 1)):
        raise SystemExit(f"bench: expected children 0..{n}, got {len(runs)} lines")
    gaps = [runs[c + 1][0] - runs[c][1] for c in range(n)]
    return gaps, samples, wall


def read_runs(path):
    runs = {}
    with open(path) as f:
        for line in f:
            c, st, e = map(int, line.split())
            runs[c] = (st, e)
    return runs


def immediate_gaps(a, tmp):
    """The kubelet-style immediate first restart: rankvisor runs the probe, which exits, and starts it
    once more at once (--restart-policy Always --backoff-limit 1). One gap per rankvisor run,
    interleaved with the same probe restarted by the smallest possible supervisor (a posix_spawn +
    waitpid loop in this driver)."""
    probe = os.path.join(a.probes, "stamp_probe")
    argv = [a.rankvisor, "--restart-policy", "Always", "--backoff-limit", "1", "--", probe]
    gaps, ref = [], []
    env = dict(os.environ)
    for i in range(a.restart_samples):
        out = os.path.join(tmp, f"first-restart-{i}.txt")
        code = wait(spawn(argv + [out]))
        runs = read_runs(out)
        if code != 0 or sorted(runs) != [0, 1]:
            raise SystemExit(f"bench: rankvisor exited {code} with children {sorted(runs)}, expected 0 and [0, 1]")
        gaps.append(runs[1][0] - runs[0][1])
        out = os.path.join(tmp, f"reference-{i}.txt")
        for c in (0, 1):
            env["RANKVISOR_RESTART_COUNT"] = str(c)
            wait(spawn([probe, out], env=env))
        runs = read_runs(out)
        ref.append(runs[1][0] - runs[0][1])
    return gaps, ref


def bench_restart(rep, a, tmp):
    gaps, ref = immediate_gaps(a, tmp)
    rep(
        f"4. Restart gap: the child's last instruction -> the next child's main(), the first restart after a"
        f" crash (immediate, as the kubelet's); {a.restart_samples} rankvisor runs; microseconds"
    )
    rows = [
        ["rankvisor", us(median(gaps)), us(percentile(gaps, 10)), us(percentile(gaps, 90)), us(min(gaps)), us(max(gaps))],
        ["reference: python spawn+wait loop", us(median(ref)), us(percentile(ref, 10)), us(percentile(ref, 90)), us(min(ref)), us(max(ref))],
    ]
    rep.table(["", "median", "p10", "p90", "min", "max"], rows)
    m = median(gaps)
    rep(f"   rankvisor median {m / 1e6:.3f} ms, target < 5 ms: {verdict(m < 5e6)}")
    rep()
    n = a.restarts
    runs = [
        ("rankvisor", restart_run(a, tmp, [], [], "plain")),
        (
            "rankvisor --status-fd",
            restart_run(a, tmp, ["--status-fd", "3"], [(os.POSIX_SPAWN_OPEN, 3, "/dev/null", os.O_WRONLY, 0)], "sfd"),
        ),
    ]
    rep(f"   {n} restarts in a row at the backoff floor (--backoff-initial 0s --backoff-max 10ms): gaps and rankvisor itself")
    rows = []
    for name, (gaps, _, wall) in runs:
        rows.append([name, len(gaps), us(median(gaps)), us(percentile(gaps, 90)), us(max(gaps)), f"{(n + 1) / (wall / 1e9):.0f}"])
    rep.table(["", "restarts", "gap median", "p90", "max", "children/s"], rows)
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


def bench_images(rep, a):
    if not a.images:
        return
    rep("5. Images (images/build.sh; docker image inspect)")
    rows = []
    for tag in a.images.split(","):
        out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Size}}", tag], capture_output=True, text=True)
        if out.returncode != 0:
            rows.append([tag, "not built", ""])
            continue
        b = int(out.stdout.strip())
        rows.append([tag, b, f"{b / 1048576:.2f}"])
    rep.table(["", "bytes", "MiB"], rows)
    slim = [r for r in rows if r[0].endswith("-slim") and isinstance(r[1], int)]
    if slim:
        rep(f"   rankvisor-only image {slim[0][2]} MiB, target <= 4 MiB: {verdict(slim[0][1] <= 4 * 1048576)}")
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
    rep(f"  machine   {platform.machine()}, {os.cpu_count()} cpus, Linux {platform.release()}")
    rep(f"  rankvisor {version([a.rankvisor, '--version'])}, {os.path.getsize(a.rankvisor) / 1024:.0f} KiB ({a.rankvisor})")
    rep(f"  build     {a.build}")
    rep(f"  tini      {version([a.tini, '--version'])} ({a.tini}; {a.tini_static})")
    with open("/proc/loadavg") as f:
        rep(f"  load      {f.read().split()[:3]} at the start (1, 5, 15 min; other jobs share the cores)")
    rep(f"  /proc     {nproc} processes visible")
    rep("  Every supervisor runs with its stderr on /dev/null and default options unless shown.")
    rep()


def label_path(v):
    if "=" not in v:
        raise argparse.ArgumentTypeError(f"{v!r}: expected LABEL=PATH")
    return tuple(v.split("=", 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rankvisor", required=True)
    p.add_argument("--tini", required=True)
    p.add_argument("--tini-static", required=True)
    p.add_argument("--build", default="?", help="how the measured rankvisor was built (printed)")
    p.add_argument("--images", default="", help="comma-separated image tags whose sizes to print")
    p.add_argument(
        "--also",
        action="append",
        default=[],
        type=label_path,
        metavar="LABEL=PATH",
        help="another rankvisor build measured beside the first in launch and memory (repeatable)",
    )
    p.add_argument("--only", default="", help="comma-separated sections to run: launch,memory,term,restart (default all)")
    p.add_argument("--probes", required=True, help="directory holding term_probe and stamp_probe")
    p.add_argument("--out", required=True, help="where to write the table as well")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--memory-rounds", type=int, default=5)
    p.add_argument("--term-samples", type=int, default=50)
    p.add_argument("--restart-samples", type=int, default=50)
    p.add_argument("--restarts", type=int, default=200)
    a = p.parse_args()
    if a.restarts < 11:
        p.error("--restarts must be at least 11 (fds and RSS are sampled at restart 10 and at the last)")
    rep = Report()
    started = time.monotonic()
    header(rep, a)
    with tempfile.TemporaryDirectory(prefix="rankvisor-bench-") as tmp:
        only = set(filter(None, a.only.split(","))) or {"launch", "memory", "term", "restart"}
        if "launch" in only:
            bench_launch(rep, a)
        if "memory" in only:
            bench_rss(rep, a)
        if "term" in only:
            bench_term(rep, a, tmp)
        if "restart" in only:
            bench_restart(rep, a, tmp)
    bench_images(rep, a)
    with open("/proc/loadavg") as f:
        rep(f"load at the end: {f.read().split()[:3]}")
    rep(f"(benchmarks took {time.monotonic() - started:.0f} s)")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(rep.lines) + "\n")
    print(f"written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
