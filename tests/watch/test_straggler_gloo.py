"""The straggler model against a real gloo group: three ranks step together, rank 2 computes
2.5x longer; each keeps a StragglerWindow of wall and all_reduce seconds per step, and
straggler.detect on what they publish names rank 2 (which waits least, as DDP predicts)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from ddpnet.local import LocalRanks
from ddpnet.watch import straggler
from ddpnet.watch.state import RankState, Snapshot

RANK = textwrap.dedent("""
    import json, time
    import torch
    import torch.distributed as dist
    from ddpnet.watch.straggler import StragglerWindow

    dist.init_process_group("gloo")
    me = dist.get_rank()
    t = torch.ones(1 << 16)
    window = StragglerWindow(size=20)
    dist.all_reduce(t)
    for step in range(12):
        start = time.perf_counter()
        time.sleep(0.05 if me == 2 else 0.02)          # the "compute"
        called = time.perf_counter()
        dist.all_reduce(t)
        end = time.perf_counter()
        window = window.add(end - start, end - called)
    print(json.dumps({"step": window.step_times, "wait": window.wait_times}))
    dist.destroy_process_group()
""")


def test_slow_rank_of_a_real_gloo_group_is_named(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    with LocalRanks([sys.executable, str(script)], 3, capture=True) as ranks:
        result = ranks.wait(timeout=120)
    assert result.code == 0, [e.stderr[-2000:] for e in result.exits]
    states = {}
    for e in result.exits:
        got = json.loads(e.stdout.strip().splitlines()[-1])
        states[e.rank] = RankState(rank=e.rank, world_size=3, host="localhost",
                                   step_times=tuple(got["step"]), wait_times=tuple(got["wait"]))
    waits = {r: sorted(s.wait_times)[6] for r, s in states.items()}
    assert waits[2] < min(waits[0], waits[1])  # the slow rank waits least
    found = straggler.detect(Snapshot(3, 0.0, states))
    assert found is not None and found.ranks == (2,), found
    assert found.summary.startswith("rank 2 (localhost) computes")
