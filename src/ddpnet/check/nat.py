"""Advertised is not reachable: the store reached through a VIP, load balancer, port-forward
or NAT (a Kubernetes Service, ``docker -p``, an SSH tunnel), while the ranks then connect to
the addresses the others advertise, which may not be routable from them.

Evidence, per rank: the address MASTER_ADDR resolved to on that node (``names.master``)
against rank 0's own addresses (``own_addresses``): a rank that reached the store at an
address rank 0 does not have went through a translation. With the mesh's failing pairs,
rank 0 names each such rank, the address it reached the store at, what it advertises and who
cannot reach it (pure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.check.causes import Cause

OK, SELF, UNKNOWN = "ok", "self", "?"


def translated(got: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """Rank -> the address it reached the store at, for ranks that reached it at an address
    rank 0 does not have (not rank 0's own host)."""
    ref = got.get(0)
    if ref is None:
        return {}
    own = {str(a) for a in ref.get("own_addresses") or ()} | {str(ref.get("address"))}
    out = {}
    for r, f in got.items():
        seen = (f.get("names") or {}).get("master") or {}
        addrs = [str(a) for a in seen.get("addresses") or ()] if isinstance(seen, Mapping) \
            else []
        if r != 0 and addrs and addrs[0] not in own and str(f.get("address")) not in own:
            out[r] = addrs[0]
    return out


def compare_translated(matrix: Sequence[Sequence[str]], got: Mapping[int, Mapping[str, Any]],
                       labels: Sequence[str]) -> list[Cause]:
    """``advertised-unreachable``: ranks that reached the store through a translation and
    whose advertised address some peers cannot reach (or that cannot reach the peers')."""
    via = translated(got)
    items = []
    for k, reached in sorted(via.items()):
        into = [i for i in range(len(matrix)) if k < len(matrix[i])
                and matrix[i][k] not in (OK, SELF, UNKNOWN)]
        out = [j for j in range(len(matrix[k]) if k < len(matrix) else 0)
               if matrix[k][j] not in (OK, SELF, UNKNOWN)]
        if into or out:
            items.append((k, reached, into, out))
    if not items:
        return []
    rank0 = str(got[0].get("address"))
    return [Cause(
        id="advertised-unreachable", stage="reachability",
        hosts=tuple(labels[k] for k, _, _, _ in items), ranks=tuple(k for k, _, _, _ in items),
        detail="; ".join(_line(k, reached, into, out, got, matrix, labels, rank0)
                         for k, reached, into, out in items)
               + ": the store is reached through a VIP, NAT or port-forward, but gloo/NCCL "
               "connect to the addresses the ranks advertise",
        fix="make the advertised addresses reachable between all ranks: run the ranks in one "
            "routed network (Kubernetes: hostNetwork: true or a headless Service; Docker: "
            "--network host), or route/open them; MASTER_ADDR through a VIP works only when "
            f"the ranks also reach each other directly (and rank 0 at {rank0})",
    )]


def _line(k: int, reached: str, into: Sequence[int], out: Sequence[int],
          got: Mapping[int, Mapping[str, Any]], matrix: Sequence[Sequence[str]],
          labels: Sequence[str], rank0: str) -> str:
    f = got[k]
    text = (f"rank {k} on {labels[k]} reached the store at {reached} (not an address of rank "
            f"0, which is {rank0}) and advertises {f.get('address')}:{f.get('mesh_port')}")
    if into:
        text += ", which rank(s) " + ", ".join(f"{i} ({matrix[i][k]})" for i in into) + \
            " cannot reach"
    if out:
        text += ("; it cannot reach the advertised address of rank(s) "
                 + ", ".join(f"{j} {got.get(j, {}).get('address')} ({matrix[k][j]})"
                             for j in out))
    return text
