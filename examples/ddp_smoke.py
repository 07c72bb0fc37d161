"""DDP smoke test under rankvisor: a real gloo rendezvous at MASTER_ADDR:MASTER_PORT.

Started by rankvisor directly (RANK and WORLD_SIZE from the operator) or by torchrun (which sets
them per process from the operator's PET_* variables). It checks:
  1. all_reduce(SUM) of known per-rank values, a few rounds: every rank gets the known sum;
  2. a small DistributedDataParallel model, initialised differently on every rank and trained on
     different data per rank: afterwards its weights are equal on every rank (DDP broadcasts rank
     0's weights at construction and averages the gradients at every step).
Prints one `DDP_CHECK {json}` line and exits 0 when every check passed, 1 otherwise.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

ALL_REDUCE_ROUNDS = 5
DDP_STEPS = 10


def check_all_reduce(rank: int, world: int) -> list[str]:
    failures = []
    for k in range(1, ALL_REDUCE_ROUNDS + 1):
        # Rank r contributes k*(r+1) in every slot of a 4-vector: the sum is k*W(W+1)/2.
        t = torch.full((4,), float(k * (rank + 1)))
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        expected = k * world * (world + 1) / 2
        if not torch.equal(t, torch.full((4,), float(expected))):
            failures.append(f"all_reduce round {k}: got {t.tolist()}, expected {expected} everywhere")
    m = torch.tensor([float(rank)])
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    if m.item() != world - 1:
        failures.append(f"all_reduce MAX: got {m.item()}, expected {world - 1}")
    return failures


def gather_weights(model: torch.nn.Module, world: int) -> list[torch.Tensor]:
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    return gathered


def check_ddp(rank: int, world: int) -> tuple[list[str], float]:
    torch.manual_seed(100 + rank)  # different initial weights per rank, on purpose
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    failures = []
    # Equal weights at the end prove something only if they were not equal to begin with.
    initial = gather_weights(model, world)
    if world > 1 and all(torch.equal(g, initial[0]) for g in initial):
        failures.append("the initial weights are already equal on every rank: the check would prove nothing")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(7 + rank)  # different data per rank
    loss = torch.tensor(float("nan"))
    for _ in range(DDP_STEPS):
        x = torch.randn(32, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
    gathered = gather_weights(model, world)
    failures += [
        f"DDP weights of rank {r} differ from rank 0's by {(g - gathered[0]).abs().max().item()}"
        for r, g in enumerate(gathered)
        if not torch.equal(g, gathered[0])
    ]
    return failures, loss.item()


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    t0 = time.monotonic()
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rendezvous_s = time.monotonic() - t0
    failures = check_all_reduce(rank, world)
    generation = os.environ.get("RANKVISOR_GENERATION", "0")
    if os.environ.get("DDP_SMOKE_CRASH_RANK") == str(rank) and generation == "0":
        # For the job-scope test: this rank dies mid-run; the others block in the next collective
        # until rankvisor stops them and starts everyone again in generation 1.
        print(f"ddp_smoke rank {rank}: crashing mid-run on purpose (generation {generation})", flush=True)
        os._exit(3)
    ddp_failures, loss = check_ddp(rank, world)
    failures += ddp_failures
    dist.barrier()
    dist.destroy_process_group()
    result = {
        "rank": rank,
        "world_size": world,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "torchelastic": "TORCHELASTIC_RUN_ID" in os.environ,
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        "rendezvous_s": round(rendezvous_s, 3),
        "generation": int(generation),
        "all_reduce_rounds": ALL_REDUCE_ROUNDS,
        "ddp_steps": DDP_STEPS,
        "ddp_loss": loss,
        "failures": failures,
        "passed": not failures,
    }
    print("DDP_CHECK " + json.dumps(result, sort_keys=True), flush=True)
    for f in failures:
        print(f"ddp_smoke rank {rank}: {f}", file=sys.stderr)
    return 0 if not failures else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is printed and the process group destroyed: skip the interpreter's teardown, where
    # torch 2.13 sometimes aborts ("terminate called without an active exception", SIGABRT) while
    # destroying a still-joinable C++ thread, which would turn a passed run into a failure.
    os._exit(code)
