"""One rank for the init tests: ``python init_worker.py INIT_METHOD...``; runs ddpnet.init()
once per init method given (env, tcp://..., file://...), all_reduces, shuts down, and prints
one JSON line per round (or the RendezvousError's cause)."""

from __future__ import annotations

import json
import os
import sys


def emit(obj: object) -> None:
    """One JSON line in one write: ranks share the pipe, and under PYTHONUNBUFFERED a
    ``print`` is two writes that another rank's line can land between."""
    os.write(1, (json.dumps(obj) + "\n").encode())


def plain() -> int:
    """What the guides do: init_process_group("gloo") with env:// and nothing else."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    try:
        dist.init_process_group(
            "gloo", timeout=timedelta(seconds=float(os.environ.get("NT_PLAIN_TIMEOUT", "8"))))
        t = torch.ones(1)
        dist.all_reduce(t)
    except Exception as exc:
        emit({"plain": "failed", "error": str(exc)[:500]})
        os._exit(1)  # a half-built gloo group can hang the interpreter's exit
    emit({"plain": "ok", "sum": t.item()})
    return 0


def main() -> int:
    if sys.argv[1:] == ["plain"]:
        return plain()
    import time

    import ddpnet
    from ddpnet.errors import RendezvousError

    timeout = float(os.environ.get("NT_CONNECT_TIMEOUT", "20"))
    join = os.environ.get("NT_JOIN_TIMEOUT")
    for method in sys.argv[1:] or ["env"]:
        before = dict(os.environ)
        t0 = time.monotonic()
        try:
            h = ddpnet.init(init_method=None if method == "env" else method,
                            connect_timeout=timeout,
                            timeout=float(os.environ.get("NT_GROUP_TIMEOUT", "30")),
                            join_timeout=float(join) if join else None)
        except RendezvousError as exc:
            emit({"cause": exc.cause, "message": exc.message, "hint": exc.hint,
                  "rank": exc.rank, "host": exc.host, "elapsed": time.monotonic() - t0})
            return 1
        import torch
        import torch.distributed as dist

        during = dict(os.environ)
        changed = sorted(k for k in set(before) | set(during) if before.get(k) != during.get(k))
        t = torch.tensor([float(h.rank + 1)])
        dist.all_reduce(t)
        ddpnet.shutdown()
        emit({
            "method": method, "rank": h.rank, "world_size": h.world_size,
            "backend": h.backend, "device": h.device, "interface": h.interface,
            "environ_set": h.environ_set, "changed": changed, "sum": t.item(),
            "restored": dict(os.environ) == before, "initialized": dist.is_initialized(),
            "reason": h.selection.gloo.reason if h.selection else "",
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
