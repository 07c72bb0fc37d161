"""Point-to-point smoke test for a PyTorchJob of one Master and N Workers (rankvisor's own program).

It plays the part of the smoke-dist image's entrypoint of Kubeflow's examples: rank 0 sends every
other rank a tensor it can predict, each of them checks what it received and sends back the
elementwise square, and rank 0 checks every answer. The group comes from the operator's env
(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK). Each rank prints one `SENDRECV_CHECK {json}` line
and exits 0 when every check passed, 1 otherwise. `--backend` as the mnist image takes it.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

from smoke_check import finish, init_group, run

SHAPE = (2, 3)


def payload(peer: int) -> torch.Tensor:
    """What rank 0 sends to `peer`: distinct per peer, so a crossed message is caught."""
    return torch.arange(6, dtype=torch.float32).reshape(SHAPE) + 10.0 * peer


def lead(world: int) -> tuple[list[int], list[str]]:
    peers, failures = [], []
    for peer in range(1, world):
        dist.send(payload(peer), dst=peer)
        answer = torch.empty(SHAPE)
        dist.recv(answer, src=peer)
        want = payload(peer) * payload(peer)
        if not torch.equal(answer, want):
            failures.append(f"rank {peer} answered {answer.tolist()}, expected {want.tolist()}")
        peers.append(peer)
    return peers, failures


def follow(rank: int) -> tuple[list[int], list[str]]:
    got = torch.empty(SHAPE)
    dist.recv(got, src=0)
    failures = []
    if not torch.equal(got, payload(rank)):
        failures.append(f"received {got.tolist()} from rank 0, expected {payload(rank).tolist()}")
    dist.send(got * got, dst=0)
    return [0], failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo", help="torch.distributed backend (default gloo)")
    args = parser.parse_args()
    env_rank, env_world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rank, world = init_group(args.backend)
    failures = []
    if (rank, world) != (env_rank, env_world):
        failures.append(f"the group says rank {rank} of {world}, the env RANK {env_rank} of {env_world}")
    if world < 2:
        failures.append(f"world size {world}: nobody to send to")
    peers, sent = lead(world) if rank == 0 else follow(rank)
    failures += sent
    result = {
        "rank": rank,
        "world_size": world,
        "backend": args.backend,
        "peers": peers,
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        "failures": failures,
        "passed": not failures,
    }
    code = finish("SENDRECV_CHECK", result)
    for f in failures:
        sys.stderr.write(f"sendrecv rank {rank}: {f}\n")
    return code


if __name__ == "__main__":
    run(main)
