"""Hang detection latency of the HyperPod elastic agent's own log monitoring (hyperpod-elastic-agent
1.1.3, `logagent/log_agent.py` loaded alone: no torch): the peer of scripts/bench-hang-latency.sh.

Usage: python3 hang_latency_agent.py AGENT_SRC N...

For each N, three runs: a `LogAgent` is started on an attempt directory with one rule
`expectedRecurringFrequencyInSeconds: N` (its monitor loop on its own thread, as in the agent,
with the real clock and its 1 s read interval); one matching line is appended to the rank's
stdout.log, the time stamped just before; the agent's log state is polled every 5 ms until it is HANGING.
Prints (HANGING - line) - N. That is when the agent's `/status` would first say so: the operator
still has to poll it and send `/stop` before the child gets a signal.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hyperpod"))
from log_agent_module import load  # noqa: E402


def main():
    agent_src, ns = sys.argv[1], [int(n) for n in sys.argv[2:]]
    mod = load(agent_src)
    for n in ns:
        for run in (1, 2, 3):
            with tempfile.TemporaryDirectory(prefix="hp-hang-") as attempt_dir:
                os.makedirs(os.path.join(attempt_dir, "0"))
                log = os.path.join(attempt_dir, "0", "stdout.log")
                open(log, "w").close()
                agent = mod.LogAgent(1)
                rule = {"name": "Step", "logPattern": ".*step.*", "expectedRecurringFrequencyInSeconds": n}
                agent.start(attempt_dir, log_monitoring_configuration=[rule])
                with open(log, "a") as f:
                    t0 = time.monotonic()
                    f.write("step\n")
                    f.flush()
                limit = t0 + n + 10
                while agent.log_state[0] != mod.LogState.HANGING:
                    if time.monotonic() > limit:
                        sys.exit(f"N={n}s run {run}: the agent was not HANGING {n + 10} s after the line")
                    time.sleep(0.005)
                d = time.monotonic() - t0
                agent.stop()
            print(f"N={n}s run {run}: HANGING {d:.3f} s after the line ({d - n:.3f} s past N)")


if __name__ == "__main__":
    main()
