"""What the Python programs of this directory share (rankvisor's own code, not a Kubeflow example).

`sendrecv.py`, `echo.py` and `demo.py` join a gloo group from the env they are given, check
something, leave the group and print one `TAG {json}` line. They import this module from their own
directory, which Python puts first on `sys.path` however they are started: `python sendrecv.py`,
`torchrun demo.py`, `python -m torch.distributed.run ./echo.py`.
"""

import datetime
import json
import os
import sys
from typing import Callable, NoReturn

import torch.distributed as dist

GROUP_TIMEOUT = datetime.timedelta(seconds=120)


def init_group(backend: str = "gloo") -> tuple[int, int]:
    """Join the process group the env describes (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE):
    this process's rank and the world size."""
    dist.init_process_group(backend, init_method="env://", timeout=GROUP_TIMEOUT)
    return dist.get_rank(), dist.get_world_size()


def finish(tag: str, result: dict) -> int:
    """Leave the group once every rank is done with it, then print `TAG {json}` in one write (the
    processes of a node may share a pipe): 0 when `result` passed, 1 otherwise."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.write(tag + " " + json.dumps(result, sort_keys=True) + "\n")
    return 0 if result["passed"] else 1


def run(main: Callable[[], int]) -> NoReturn:
    """Exit with `main()`'s code once the outputs are flushed, skipping the interpreter's teardown:
    torch sometimes aborts there on a still-joinable C++ thread after the group is destroyed
    ("terminate called without an active exception", SIGABRT), which would turn a passed run into
    a failure."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
