"""A rank for the asynchronous stand-ins of tests/watch/test_flight_gloo.py: ``python
flight_standin.py MODE RANK PORT``. Rank 0 comes 2 s late; rank 1 is already past the call:

- async: rank 1's ``all_reduce(async_op=True)`` returns at once, it computes, then blocks in
  ``work.wait()`` (a C call) far from the call, as an NCCL rank blocks in a stream sync;
- ddp: rank 1 runs DDP's backward, whose bucket all-reduce the C++ Reducer launches
  asynchronously and waits for inside ``loss.backward()``.

A thread samples the state the heartbeat would publish (``Beacon.state()``) every 50 ms and
prints what it holds in flight, one JSON line each."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "64")

import torch
import torch.distributed as dist

from ddpnet.watch.heartbeat import Beacon
from ddpnet.watch.recorder import Recorder
from ddpnet.watch.session import _next_seq
from ddpnet.watch.state import RankState


def sample(beacon: Beacon, stop: threading.Event) -> None:
    while not stop.is_set():
        state = beacon.state()
        flight = state.in_flight()
        print(json.dumps({"t": time.time(), "phase": state.phase, "last_seq": state.last_seq,
                          "flight": flight.to_dict() if flight else None}), flush=True)
        time.sleep(0.05)


def main(mode: str, rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    group = dist.distributed_c10d._get_default_group()
    rec = Recorder()
    rec.backend = "gloo"
    rec.issued = lambda: max(0, _next_seq(group) - 1)
    undo = rec.wrap_collectives(dist, lambda: _next_seq(group))
    beacon = Beacon(rec, RankState(rank=rank, world_size=2), Path("."))
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(beacon, stop), daemon=True)
    if rank == 1:
        sampler.start()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    if rank == 0:
        time.sleep(2.0)
    rec.set_step(0)
    if mode == "async":
        work = dist.all_reduce(torch.ones(5), async_op=True)
        print(json.dumps({"returned": time.time()}), flush=True)
        time.sleep(0.3 if rank == 1 else 0)  # compute, then wait far from the call
        work.wait()
    else:
        rec.set_phase("backward")
        print(json.dumps({"returned": time.time()}), flush=True)
        model(torch.randn(8, 16)).sum().backward()
    print(json.dumps({"waited": time.time()}), flush=True)
    time.sleep(0.2)
    stop.set()
    undo()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
