"""Interface variables as the libraries read them, compared across nodes (rank 0, pure).

Every node publishes what gloo, NCCL and TensorPipe really bind there (``library_picks``,
from :mod:`ddpnet.net.picks`) and its interfaces' addresses (``ifaddrs``). One value can pick
different networks on different nodes (``eth`` matching ``eth1`` first on one of them,
``^docker0`` leaving ``lo`` or a management NIC), and gloo pairs its devices by position, so
the ranks must agree on their count. Each is judged against the cluster subnet: the network
of the addresses this check selected, the majority's (rank 0 breaks ties).
"""

from __future__ import annotations

import ipaddress
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.doctor.base import CheckResult as DoctorResult
from ddpnet.net.picks import GLOO, NCCL, Pick, is_loopback_pick

_LIB = {GLOO: "gloo", NCCL: "NCCL", "TP_SOCKET_IFNAME": "TensorPipe"}


def cluster_subnet(nodes: Sequence[NodeFacts]) -> str | None:
    """The network of the selected addresses: the majority's, rank 0's on a tie."""
    counts = Counter(str(n.facts["subnet"]) for n in nodes if n.facts.get("subnet"))
    if not counts:
        return None
    ref = next((str(n.facts.get("subnet")) for n in nodes if n.rank == 0), None)
    return max(counts, key=lambda s: (counts[s], s == ref))


def picks_of(n: NodeFacts) -> list[Pick]:
    return [Pick.from_dict(p) for p in n.facts.get("library_picks") or ()
            if isinstance(p, Mapping)]


def interface_in(n: NodeFacts, subnet: str | None) -> str | None:
    """The interface of node ``n`` with an address in ``subnet`` (from its ``ifaddrs``)."""
    try:
        net = ipaddress.ip_network(str(subnet), strict=False) if subnet else None
    except ValueError:
        net = None
    if net is None:
        return None
    for name, cidrs in (n.facts.get("ifaddrs") or {}).items():
        for cidr in cidrs:
            try:
                if ipaddress.ip_interface(cidr).ip in net:
                    return str(name)
            except ValueError:
                continue
    return None


def compare_picks(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """``ifname-mismatch``: a user-set variable that binds, on some nodes, outside the cluster
    network (or loopback), and gloo device lists of different lengths."""
    if len({n.host for n in nodes}) < 2:
        return []
    ref = cluster_subnet(nodes)
    slots: dict[tuple[str, int], list[tuple[NodeFacts, Pick]]] = defaultdict(list)
    for n in nodes:
        named = _named_by_selection(n)
        for p in picks_of(n):
            # unset, missing, or already a problem of this node's selection: named elsewhere
            if p.value is not None and p.iface is not None and p.var not in named:
                slots[(p.var, p.slot)].append((n, p))
    # a gloo device only some ranks have is the device count's finding, not a network's
    judged = [k for k in sorted(slots)
              if k[0] != GLOO or k[1] == 0 or len(slots[k]) == len(nodes)]
    causes = [c for key in judged if (c := _judge(key, slots[key], ref)) is not None]
    devices = _gloo_devices(nodes)
    return causes + ([devices] if devices else [])


def _named_by_selection(n: NodeFacts) -> set[str]:
    """Variables this node's selection already reports as a problem (``VAR=value: why``)."""
    return {str(problem[1]).split("=", 1)[0] for problem in n.facts.get("selection_problems")
            or () if len(problem) > 1}


def _where(p: Pick, ref: str | None) -> str:
    if is_loopback_pick(p):
        return "loopback"
    return f"{p.subnet}, not the cluster subnet {ref}" if p.subnet != ref else str(p.subnet)


def _judge(key: tuple[str, int], items: list[tuple[NodeFacts, Pick]],
           ref: str | None) -> Cause | None:
    var, slot = key
    groups: dict[str, list[tuple[NodeFacts, Pick]]] = defaultdict(list)
    for n, p in items:
        if not is_loopback_pick(p):
            groups[str(p.subnet)].append((n, p))
    if ref in groups:
        major: str | None = ref
    else:
        major = max(groups, key=lambda s: len(groups[s])) if groups else None
    odd = [(n, p) for n, p in items if is_loopback_pick(p) or str(p.subnet) != major]
    if not odd and (major == ref or ref is None):
        return None
    fail = bool(odd)
    shown = odd or items
    lib = _LIB.get(var, var)
    good = groups.get(major or "", [])
    target = ref if ref is not None else major
    return Cause(
        id="ifname-mismatch", stage="facts", severity="fail" if fail else "warn",
        hosts=tuple(n.label for n, _ in shown), ranks=tuple(n.rank for n, _ in shown),
        detail=f"{var} as {lib} reads it"
               + (f" (device {slot})" if var == GLOO and slot else "") + " binds "
               + "; ".join(f"rank {n.rank} on {n.label}: {var}={p.value} picks {p.iface} "
                           f"{p.address} ({_where(p, ref)}; {p.why})" for n, p in shown)
               + (f"; rank(s) {','.join(str(n.rank) for n, _ in good)}: {good[0][1].iface} "
                  f"in {major}" if fail and good else "")
               + ("" if fail else f": every node agrees, but not on the network MASTER_ADDR "
                  f"is reached on ({ref}); {lib} traffic takes another network"),
        fix="; ".join(_fix(n, var, target) for n, _ in shown),
        data={"var": var},
        evidence=(*(f"rank {n.rank} on {n.label}: {var}={p.value} picks {p.iface} "
                    f"{p.address} ({p.why})" for n, p in shown),
                  *((f"{len(good)} other rank(s) bind in {major}",) if fail and good else ())),
        ruled_out=(f"what this check itself bound: {lib} reads {var} its own way, "
                   "judged here as the library reads it",),
        see_for_yourself="ddpnet env  # network.variables, on each named host",
    )


def _fix(n: NodeFacts, var: str, subnet: str | None) -> str:
    iface = interface_in(n, subnet)
    value = (f"={iface}" if var == NCCL else iface) if iface else f"<its interface in {subnet}>"
    return f"on {n.label}: export {var}={value}"


def _gloo_devices(nodes: Sequence[NodeFacts]) -> Cause | None:
    """gloo makes one context per device and connects device i to device i of every rank: a
    rank with more devices waits for peers that never come."""
    count = {n.rank: sum(1 for p in picks_of(n) if p.var == GLOO) or 1 for n in nodes}
    if len(set(count.values())) < 2 or not any(p.var == GLOO for n in nodes
                                               for p in picks_of(n)):
        return None
    common = Counter(count.values()).most_common(1)[0][0]
    odd = [n for n in nodes if count[n.rank] != common]
    values = {n.rank: next((p.value for p in picks_of(n) if p.var == GLOO), "unset")
              for n in nodes}
    return Cause(
        id="ifname-mismatch", stage="facts",
        hosts=tuple(n.label for n in odd), ranks=tuple(n.rank for n in odd),
        detail="gloo gets a different number of devices per rank: "
               + "; ".join(f"rank {n.rank} on {n.label}: {count[n.rank]} "
                           f"(GLOO_SOCKET_IFNAME={values[n.rank]})" for n in odd)
               + f"; the other rank(s): {common}. gloo builds one context per device and "
               "connects device i to device i on every rank, so the extra context waits "
               "until the timeout",
        fix="list the same number of interfaces in GLOO_SOCKET_IFNAME on every node: "
            + "; ".join(_fix(n, GLOO, cluster_subnet(nodes)) for n in odd),
        data={"var": GLOO, "devices": True},
        evidence=(*(f"rank {n.rank} on {n.label}: {count[n.rank]} gloo device(s) "
                    f"(GLOO_SOCKET_IFNAME={values[n.rank]})" for n in odd),
                  f"{len(nodes) - len(odd)} other rank(s): {common} device(s)"),
        see_for_yourself="echo $GLOO_SOCKET_IFNAME  # on each node",
    )


def shell_cause(doctor: DoctorResult, host: str) -> Cause | None:
    """``--local N`` runs its ranks on loopback in place of the shell's GLOO/NCCL/
    TP_SOCKET_IFNAME, yet every job started from that shell reads them: a value the doctor's
    ``environment.ifname`` fails (``GLOO_SOCKET_IFNAME=eth9`` on a host without eth9) fails
    the check too, in the doctor's words and with its fix (pure). One fact, one verdict:
    ``ddpnet doctor`` in the same shell says the same."""
    if doctor.status != "fail":
        return None
    return Cause(
        id="doctor-failed", stage="facts", hosts=(host,), ranks=(0,),
        detail=f"this shell's {doctor.summary} (the doctor's {doctor.id}; "
               "--local ran its ranks on lo in its place, but a job started from this shell "
               "reads it)",
        fix=doctor.fix,
        evidence=(f"{host}: {doctor.summary}",),
        ruled_out=("the check's own ranks: --local ran them on lo, so their run passing "
                   "says nothing of this variable",),
        confidence="high", see_for_yourself="ddpnet doctor",
    )
