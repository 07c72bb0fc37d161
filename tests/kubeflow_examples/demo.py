"""A small DDP training on CPU under torchrun (rankvisor's own program).

It plays the part of Kubeflow's cpu-demo (`torchrun demo.py`, nprocPerNode 2): every process
joins the group torchrun sets up from the operator's PET_* env, checks an all_reduce of ones
(the world size), then trains y = 3x - 1 with a DistributedDataParallel linear layer, each rank
on its own data and from its own initial weights. Checks: the weights agree on every rank
afterwards and the loss fell. One `DEMO_CHECK {json}` line per process; exit 0 when all passed.
"""

import os

import torch
import torch.distributed as dist

from smoke_check import finish, init_group, run

STEPS = 40


def flat_weights(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main() -> int:
    rank, world = init_group()
    failures = []
    ones = torch.ones(1)
    dist.all_reduce(ones)
    if ones.item() != world:
        failures.append(f"all_reduce of ones gave {ones.item()}, expected the world size {world}")
    torch.manual_seed(1000 + rank)  # different initial weights per rank: DDP must broadcast rank 0's
    model = torch.nn.Linear(1, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(rank)  # different data per rank
    losses = []
    for _ in range(STEPS):
        x = torch.rand(16, 1, generator=data) * 2 - 1
        loss = torch.nn.functional.mse_loss(ddp(x), 3 * x - 1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    mine = flat_weights(model)
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    failures += [f"rank {r}'s weights {w.tolist()} differ from rank 0's" for r, w in enumerate(everyone) if not torch.equal(w, everyone[0])]
    if not losses[-1] < losses[0] / 10:
        failures.append(f"the loss went from {losses[0]:.4f} to {losses[-1]:.4f}: expected a tenth or less")
    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
        "node_rank": int(os.environ.get("GROUP_RANK", "-1")),
        "steps": STEPS,
        "first_loss": round(losses[0], 5),
        "loss": round(losses[-1], 5),
        "weights": [round(v, 4) for v in mine.tolist()],
        "failures": failures,
        "passed": not failures,
    }
    return finish("DEMO_CHECK", result)


if __name__ == "__main__":
    run(main)
