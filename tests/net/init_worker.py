"""One rank for the init tests: ``python init_worker.py INIT_METHOD...``; runs ddpnet.init()
once per init method given (env, tcp://..., file://...), all_reduces, shuts down, and prints
one JSON line per round (or the RendezvousError's cause)."""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    import torch
    import torch.distributed as dist

    import ddpnet
    from ddpnet.errors import RendezvousError

    timeout = float(os.environ.get("NT_CONNECT_TIMEOUT", "20"))
    for method in sys.argv[1:] or ["env"]:
        before = dict(os.environ)
        try:
            h = ddpnet.init(init_method=None if method == "env" else method,
                            connect_timeout=timeout, timeout=30)
        except RendezvousError as exc:
            print(json.dumps({"cause": exc.cause, "message": exc.message, "hint": exc.hint,
                              "rank": exc.rank, "host": exc.host}), flush=True)
            return 1
        during = dict(os.environ)
        changed = sorted(k for k in set(before) | set(during) if before.get(k) != during.get(k))
        t = torch.tensor([float(h.rank + 1)])
        dist.all_reduce(t)
        ddpnet.shutdown()
        print(json.dumps({
            "method": method, "rank": h.rank, "world_size": h.world_size,
            "backend": h.backend, "device": h.device, "interface": h.interface,
            "environ_set": h.environ_set, "changed": changed, "sum": t.item(),
            "restored": dict(os.environ) == before, "initialized": dist.is_initialized(),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
