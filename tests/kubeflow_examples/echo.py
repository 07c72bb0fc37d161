"""Elastic echo for a Worker-only PyTorchJob run by torchrun (rankvisor's own program).

It plays the part of Kubeflow's elastic `echo` example: each process torchrun's elastic agent
starts says what the agent gave it, then joins a gloo group on the agent's MASTER_ADDR:MASTER_PORT
and checks that every rank of that group is there (an all_gather of the ranks and of the
GROUP_RANKs). One `ECHO_CHECK {json}` line per process; exit 0 when every check passed.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from smoke_check import finish, init_group, run

AGENT_VARS = (
    "LOCAL_RANK",
    "RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
)


def main() -> int:
    agent = {k: os.environ.get(k) for k in AGENT_VARS}
    failures = [f"{k} is not set" for k, v in agent.items() if v is None]
    if failures:
        sys.stdout.write("ECHO_CHECK " + json.dumps({"agent": agent, "failures": failures, "passed": False}) + "\n")
        return 1
    rank, world = init_group()
    if (rank, world) != (int(agent["RANK"]), int(agent["WORLD_SIZE"])):
        failures.append(f"the group says rank {rank} of {world}, the agent RANK {agent['RANK']} of {agent['WORLD_SIZE']}")
    mine = torch.tensor([rank, int(agent["GROUP_RANK"]), int(agent["LOCAL_RANK"])])
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    ranks = [int(t[0]) for t in everyone]
    if ranks != list(range(world)):
        failures.append(f"the group's ranks are {ranks}, expected 0..{world - 1}")
    nodes = sorted({int(t[1]) for t in everyone})
    result = {
        "pid": os.getpid(),
        "rank": rank,
        "world_size": world,
        "agent": agent,
        "group_ranks": nodes,
        "failures": failures,
        "passed": not failures,
    }
    return finish("ECHO_CHECK", result)


if __name__ == "__main__":
    run(main)
