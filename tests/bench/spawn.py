"""Run ``ddpnet.bench.run`` on N real gloo ranks (spawned processes) and collect results.

The worker lives in an importable module so spawned children can unpickle it.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any

from ddpnet.net.ports import free_port

#: a job: (name, BenchConfig, registry-factory or None)
Job = tuple[str, Any, Callable[[], Any] | None]


def _worker(rank: int, world: int, port: int, jobs: list[Job], queue: Any) -> None:
    import os
    from datetime import timedelta

    import torch.distributed as dist

    from ddpnet.bench import run
    from ddpnet.bench.collectives import REGISTRY

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GLOO_SOCKET_IFNAME": "lo"})
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        out = {}
        for name, cfg, factory in jobs:
            registry = factory() if factory else REGISTRY
            out[name] = run(cfg, registry=registry)
        dist.destroy_process_group()
        queue.put((rank, out, None))
    except BaseException as exc:  # report, never hang the parent
        queue.put((rank, None, f"{type(exc).__name__}: {exc}"))


def run_ranks(world: int, jobs: list[Job], timeout: float = 240) -> list[dict[str, Any]]:
    """Results per rank (index = rank) for each job name; raises if a rank failed."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, jobs, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        for _ in range(world):
            rank, out, err = queue.get(timeout=timeout)
            if err:
                raise AssertionError(f"rank {rank}: {err}")
            results[rank] = out
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    return [results[r] for r in range(world)]
