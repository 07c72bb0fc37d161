"""The HyperPod elastic agent's own log-rule evaluation (hyperpod-elastic-agent 1.1.3,
`logagent/log_agent.py` loaded alone: no torch), timed on the lines rankvisor's benchmark evaluates:
the peer of scripts/bench-log-rules.sh.

Usage: python3 log_rules_agent.py AGENT_SRC RULES.json PASSES LOG...

For each LOG (written by log_rules_bench --write-lines), the log repeated PASSES times is the
rank's stdout.log, and the agent's monitor loop (`LogAgent._monitor_log_loop`, with the rules as
`LogEvaluator`s) reads and evaluates every line of it as it does in a job: `readline()`, each
rule's `evaluate(line)`, the verdict. At the end of the file, where the agent would sleep a
second, the loop is stopped. The clock is the real one. Prints one line a log: lines, bytes, and
lines/s, bytes/s and ns a line by the process's CPU time (one core: the loop is one thread) and
the wall clock's.
"""

import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "hyperpod"))
from log_agent_module import load  # noqa: E402


def main():
    agent_src, rules_path, passes, logs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    mod = load(agent_src)
    with open(rules_path, encoding="utf-8") as f:
        rules = json.load(f)
    for log in logs:
        with open(log, encoding="utf-8") as f:
            text = f.read()
        agent = mod.LogAgent(1)
        agent._evaluators = {0: [mod.LogEvaluator(rule) for rule in rules]}

        def end_of_file(_seconds):
            agent._stop_signaled = True

        with tempfile.TemporaryDirectory(prefix="hp-bench-") as attempt_dir:
            os.makedirs(os.path.join(attempt_dir, "0"))
            with open(os.path.join(attempt_dir, "0", "stdout.log"), "w", encoding="utf-8") as f:
                f.write(text * passes)
            sleep, time.sleep = time.sleep, end_of_file
            cpu, wall = time.process_time(), time.perf_counter()
            agent._monitor_log_loop(0, attempt_dir)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            time.sleep = sleep
        lines = text.count("\n") * passes
        size = len(text.encode("utf-8")) * passes
        state = agent.log_eval_results[0].log_state.value
        print(f"{os.path.basename(log)}: {lines} lines, {size} bytes, verdict {state}: "
              f"{lines / cpu / 1e6:.3f} M lines/s, {size / cpu / 1e6:.2f} MB/s per core of CPU time "
              f"({cpu / lines * 1e9:.0f} ns per line); wall clock: {size / wall / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
