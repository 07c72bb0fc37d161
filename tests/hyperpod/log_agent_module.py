"""The HyperPod elastic agent's log monitoring module (hyperpod-elastic-agent 1.1.3,
`logagent/log_agent.py`), loaded alone: the package's __init__ files import torch, this file does
not. Used by replay_log_agent.py (the differential test) and by the benchmarks' peers
(scripts/bench/log_rules_agent.py, scripts/bench/hang_latency_agent.py).
"""

import importlib.util
import os


def load(agent_src):
    """`log_agent.py` from AGENT_SRC, the directory holding hyperpod_elastic_agent/ (the unpacked
    package's src/, scripts/setup-hyperpod.sh)."""
    path = os.path.join(agent_src, "hyperpod_elastic_agent", "logagent", "log_agent.py")
    spec = importlib.util.spec_from_file_location("hp_log_agent", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
