"""Probing a live gloo group's own listener is harmless: two real ranks connect to each
other's gloo port (``listening_ports``), send it garbage too, and their all_reduce still
works. This is why the watchdog may publish and probe ``backend`` for gloo."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from ddpnet.local import LocalRanks

RANK = textwrap.dedent("""
    import json, os, socket
    import torch
    import torch.distributed as dist
    from ddpnet.watch.probe import listening_ports, probe_pairs
    from ddpnet.watch.state import RankState

    dist.init_process_group("gloo")
    me, other = dist.get_rank(), 1 - dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    mine = listening_ports(exclude=[int(os.environ["MASTER_PORT"])])
    store = dist.distributed_c10d._get_default_store()
    store.set(f"port{me}", str(mine[0]))
    port = int(store.get(f"port{other}"))
    states = {me: RankState(me, 2), other: RankState(other, 2, address="127.0.0.1",
                                                     extra={"ports": {"backend": port}})}
    found = [probe_pairs(states, me, timeout=1.0, stream_bytes=0) for _ in range(3)]
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"not gloo" * 64)
    dist.barrier()
    for _ in range(5):
        dist.all_reduce(t)
    print(json.dumps({"mine": mine, "reached": [p.reachable for f in found for p in f],
                      "sum": t.tolist()}))
    dist.destroy_process_group()
""")


def test_probing_gloo_listener_leaves_the_group_working(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    with LocalRanks([sys.executable, str(script)], 2, capture=True) as ranks:
        result = ranks.wait(timeout=120)
    assert result.code == 0, [e.stderr[-2000:] for e in result.exits]
    for e in result.exits:
        out = json.loads(e.stdout.strip().splitlines()[-1])
        assert len(out["mine"]) >= 1
        assert out["reached"] == [True, True, True]
        assert out["sum"] == [64.0] * 4  # 2 * 2**5: the group survived the probes
