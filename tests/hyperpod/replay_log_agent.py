"""Replays logs through the real HyperPod elastic agent's log monitoring (hyperpod-elastic-agent
1.1.3, `logagent/log_agent.py` loaded alone: no torch) with a mocked clock.

Usage: python3 replay_log_agent.py AGENT_SRC BATCH.json
  AGENT_SRC   the directory holding hyperpod_elastic_agent/ (the unpacked package's src/)
  BATCH.json  {"cases": [{"id", "rules", "log", "timestamps", "schedule": [{"line", "at_ns"}]}]}

The schedule is when each evaluation happens (a line by its number, or an idle one), taken from
`rankvisor log-rules test --json`; the agent's own monitor loop (`LogAgent._monitor_log_loop`)
runs it: its `open()` gets a file whose readline() sets the clock and returns the scheduled line
(read from the log with Python's universal newlines, the timestamp prefix removed) or '' for an
idle evaluation. After each evaluation the per-rule states and the agent's verdict are recorded.
Prints one JSON object per case: {"id", "records": [{"line", "state", "rules", "named",
"stopped"}], "error"}.
"""

import json
import os
import sys
import tempfile
import time

from log_agent_module import load

BASE = 1_700_000_000.0  # the mocked epoch: 1/64 s steps stay exact in a float here
clock = [BASE]


def main():
    agent_src, batch_path = sys.argv[1], sys.argv[2]
    mod = load(agent_src)
    time.time = lambda: clock[0]
    time.sleep = lambda _s: None
    agent = mod.LogAgent(1)
    with open(batch_path, encoding="utf-8") as f:
        batch = json.load(f)
    attempt_dir = tempfile.mkdtemp(prefix="hp-replay-")
    os.makedirs(os.path.join(attempt_dir, "0"), exist_ok=True)
    open(os.path.join(attempt_dir, "0", "stdout.log"), "w").close()
    out = sys.stdout
    for case in batch["cases"]:
        out.write(json.dumps(run_case(mod, agent, attempt_dir, case), separators=(",", ":")) + "\n")
    out.flush()


def run_case(mod, agent, attempt_dir, case):
    clock[0] = BASE
    try:
        evaluators = [mod.LogEvaluator(rule) for rule in case["rules"]]
    except Exception as e:  # the agent refused what rankvisor accepted
        return {"id": case["id"], "records": [], "error": f"LogEvaluator refused the rules: {e!r}"}
    agent._evaluators = {0: evaluators}
    agent._log_eval_results = [mod.LogEvalResult()]
    agent._stop_signaled = False
    records = []
    schedule = list(case["schedule"])
    log = open(case["log"], "r", encoding="utf-8")  # universal newlines, as the agent opens it
    state = {"next_line": 1, "pending": False, "stopped": False}

    def snapshot():
        res = agent._log_eval_results[0]
        named = list((res.rule_name_log_line or {}).items())
        records.append({
            "state": res.log_state.value,
            "rules": [ev._state.value for ev in evaluators],
            "named": [[k, v] for k, v in named],
            "stopped": state["stopped"],
        })

    class ScheduledFile:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def readline(self):
            if state["pending"]:
                snapshot()
                state["pending"] = False
            if not schedule:
                agent._stop_signaled = True
                return ""
            item = schedule.pop(0)
            clock[0] = BASE + item["at_ns"] / 1e9
            state["pending"] = True
            if item["line"] is None:
                return ""
            line = ""
            while state["next_line"] <= item["line"]:
                line = log.readline()
                state["next_line"] += 1
            if case["timestamps"]:
                line = line.split(" ", 1)[1]
            return line

    mod.open = lambda *_a, **_k: ScheduledFile()
    error = None
    try:
        agent._monitor_log_loop(0, attempt_dir)
    except Exception as e:  # e.g. the KeyError of a verdict leaving FAULTED: monitoring ends
        state["stopped"] = True
        error = repr(e)
    finally:
        del mod.open
        log.close()
    if state["pending"]:
        snapshot()
    # After the loop died every later evaluation is the same frozen snapshot.
    while schedule:
        schedule.pop(0)
        snapshot()
    for r in records:
        r["stopped"] = r["stopped"] or False
    return {"id": case["id"], "records": records, "error": None, "loop_error": error}


if __name__ == "__main__":
    main()
