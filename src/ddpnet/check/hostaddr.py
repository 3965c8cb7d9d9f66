"""What each node's own hostname makes gloo advertise (issue 18, kinds 1, 2 and 7).

gloo without GLOO_SOCKET_IFNAME resolves the node's hostname and binds the first answer it
can bind (one of the host's own addresses), else falls back to 127.0.0.1; that address is what
it advertises to every peer. ``check`` itself pins the interface, so its own process group
works while a plain ``torchrun`` job on the same nodes would not. Each node reports what its
hostname resolves to *there* (the doctor's ``hostname_addresses``) and its interfaces'
addresses (``ifaddrs``); rank 0 names a node whose hostname leads gloo to:

- a bridge address another node has too (docker0's 172.17.0.1): ``duplicate-address``;
- an IPv6 address while a peer has no IPv6 (or the reverse): ``family-mismatch``;
- no address of its own (a stale line), so gloo falls back to loopback: ``hostname-loopback``.

A loopback first answer is the doctor's ``names.hostname`` (``hostname-loopback`` already).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddpnet.check.causes import PLAIN_JOB_BREAKS, PLAIN_JOB_SEVERITY, Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.net.names import is_loopback
from ddpnet.net.picks import GLOO, NCCL


@dataclass(frozen=True)
class GlooDefault:
    """The address gloo's default device would advertise for one node, and why it is bad."""

    node: NodeFacts
    address: str
    problem: str  # "shared", "family" or "stale"
    why: str


def _own(facts: Mapping[str, object]) -> dict[str, str]:
    """This node's addresses (no loopback, no link-local) -> interface name."""
    out: dict[str, str] = {}
    ifaddrs = facts.get("ifaddrs")
    for name, cidrs in (ifaddrs.items() if isinstance(ifaddrs, Mapping) else ()):
        for cidr in cidrs or ():
            out[str(cidr).split("/")[0]] = str(name)
    return out


def gloo_default(facts: Mapping[str, object]) -> str | None:
    """The address gloo binds without GLOO_SOCKET_IFNAME: the first answer for the hostname
    that is loopback or this host's own, else 127.0.0.1 (gloo's fallback); None unknown."""
    answers = facts.get("hostname_addresses")
    if not isinstance(answers, list) or not answers or not isinstance(facts.get("ifaddrs"),
                                                                       Mapping):
        return None
    own = _own(facts)
    return next((str(a) for a in answers if is_loopback(a) or str(a) in own), "127.0.0.1")


def _version(address: str) -> int:
    try:
        return ipaddress.ip_address(address.split("%")[0]).version
    except ValueError:  # a facts record from elsewhere: judged as no family
        return 0


def _families(facts: Mapping[str, object]) -> set[int]:
    return {_version(a) for a in _own(facts)}


def _same_host(a: NodeFacts, b: NodeFacts) -> bool:
    """Ranks of one host (one network namespace) share addresses legitimately."""
    return bool(a.facts.get("netns")) and a.facts.get("netns") == b.facts.get("netns")


def plain_gloo(facts: Mapping[str, object]) -> str | None:
    """The address a plain ``init_process_group("gloo")`` binds on this node with the job's
    environment: GLOO_SOCKET_IFNAME's first device if set, else the hostname's (pure)."""
    picks = facts.get("library_picks")
    for pick in picks if isinstance(picks, list) else ():
        if isinstance(pick, Mapping) and pick.get("var") == GLOO and not pick.get("slot"):
            return str(pick["address"]) if pick.get("address") else None
    return gloo_default(facts)


def plain_job(facts: Mapping[str, object]) -> str:
    """What a plain job binds on this node with the job's environment, beside what this
    check pinned, for the node table: gloo's address and NCCL's bootstrap one (pure)."""
    picks = facts.get("library_picks")
    nccl = next((p.get("address") for p in (picks if isinstance(picks, list) else ())
                 if isinstance(p, Mapping) and p.get("var") == NCCL), None)
    return f"gloo {plain_gloo(facts) or '?'}, nccl {nccl or '?'}"


def plain_family(nodes: Sequence[NodeFacts]) -> int | None:
    """The IP family most nodes' plain gloo binds (rank 0's on a tie; None unknown)."""
    votes = Counter(v for n in nodes if (a := plain_gloo(n.facts)) and (v := _version(a)))
    if not votes:
        return None
    rank0 = next((plain_gloo(n.facts) for n in nodes if n.rank == 0), None)
    return max(votes, key=lambda v: (votes[v], _version(rank0 or "") == v))


def _judge(n: NodeFacts, nodes: Sequence[NodeFacts]) -> GlooDefault | None:
    address = gloo_default(n.facts)
    chosen = str(n.facts.get("address") or "")
    if address is None or address == chosen or n.facts.get("interface_pinned"):
        return None
    answers = [str(a) for a in n.facts.get("hostname_addresses") or ()]
    if is_loopback(address):
        if is_loopback(answers[0]):
            return None  # the doctor's names.hostname names a loopback answer itself
        return GlooDefault(n, address, "stale",
                           f"{n.host} resolves there to {', '.join(answers)}, none of them an "
                           "address of this host, so gloo falls back to 127.0.0.1")
    peers = [m for m in nodes if m.rank != n.rank and not _same_host(m, n)
             and isinstance(m.facts.get("ifaddrs"), Mapping)]
    shared = [m for m in peers if address in _own(m.facts)]
    if shared:
        return GlooDefault(n, address, "shared",
                           f"{n.host} resolves there to {address} ({_own(n.facts)[address]}), "
                           "an address rank(s) "
                           f"{', '.join(str(m.rank) for m in shared)} have too")
    lacking = [m for m in peers if _version(address) not in _families(m.facts) | {0}]
    if lacking:
        return GlooDefault(n, address, "family",
                           f"{n.host} resolves there to IPv{_version(address)} {address}, "
                           f"which rank(s) {', '.join(str(m.rank) for m in lacking)} "
                           f"(no IPv{_version(address)} address) cannot reach")
    major = plain_family(nodes)
    other = [m for m in peers if (a := plain_gloo(m.facts)) and _version(a) != _version(address)]
    if major is not None and _version(address) != major and other:
        # dual-stack nodes: gloo pairs only devices of one family (device.cc enforces
        # ss1.ss_family == ss2.ss_family, "address family mismatch"), whatever is reachable
        return GlooDefault(n, address, "family",
                           f"{n.host} resolves there to IPv{_version(address)} {address} "
                           f"only, so gloo binds IPv{_version(address)} while rank(s) "
                           f"{', '.join(str(m.rank) for m in other)} bind IPv{major}: gloo "
                           "pairs devices of one family only (\"ss1.ss_family == "
                           "ss2.ss_family\", the forums' \"address family mismatch\")")
    return None


_IDS = {"shared": "duplicate-address", "family": "family-mismatch",
        "stale": "hostname-loopback"}


def compare_hostname_addresses(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """One cause per kind of problem, naming every node whose hostname misleads gloo."""
    found = [g for n in nodes if (g := _judge(n, nodes)) is not None]
    causes = []
    for problem, cause_id in _IDS.items():
        group = [g for g in found if g.problem == problem]
        if not group:
            continue
        causes.append(Cause(
            id=cause_id, stage="facts", severity=PLAIN_JOB_SEVERITY,
            hosts=tuple(g.node.label for g in group), ranks=tuple(g.node.rank for g in group),
            detail="gloo without GLOO_SOCKET_IFNAME advertises the address the node's own "
                   "hostname resolves to: "
                   + "; ".join(f"rank {g.node.rank} on {g.node.label}: {g.why}" for g in group)
                   + f" ({PLAIN_JOB_BREAKS}; this check pins the interface, so its own group "
                     "worked)",
            fix="; ".join(f"on {g.node.label}: map {g.node.host} to "
                          f"{g.node.facts.get('address')} in /etc/hosts (`getent ahosts "
                          f"{g.node.host}`), or export GLOO_SOCKET_IFNAME="
                          f"{g.node.facts.get('interface')}" for g in group)
                + " (ddpnet.init() pins it)",
            evidence=tuple(f"on {g.node.label}: {g.node.host} resolves to "
                           + ", ".join(map(str, g.node.facts.get("hostname_addresses") or ()))
                           + f"; plain gloo binds {g.address}; this check bound "
                           f"{g.node.facts.get('interface')} {g.node.facts.get('address')}"
                           for g in group),
            ruled_out=("this check's own group: it pinned the interface, so it worked",),
            see_for_yourself="getent ahosts $(hostname); ip -br addr",
        ))
    return causes
