"""Each node's resolver, judged across the job (pure): a slow or dead nameserver on a node
whose /etc/hosts lacks its peers (issue 42).

Every rank's doctor (``names.resolver``) times the lookups that rank makes through its own
resolver configuration (its hostname, MASTER_ADDR, reverse lookups of MASTER_ADDR's address
and its own); rank 0, which accepts every rank's store connection and so looks each of them
up, also times a reverse lookup of every peer's address (``peer_lookups``). A node whose
lookups are slow or unanswered is ``slow-resolver``: a warning when it only slows init (the
seconds it costs), a failure when a name the job needs gets no answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts
from ddpnet.net.resolver import Lookup, ResolvConf, judge_lookups

CAUSE = "slow-resolver"
#: at most this many peer addresses rank 0 looks up (one per distinct address)
PEERS_TIMED = 16


def _lookups(raw: Any) -> list[Lookup]:
    return [lk for item in (raw if isinstance(raw, list) else ())
            if (lk := Lookup.from_dict(item)) is not None]


def _conf(raw: Mapping[str, Any]) -> ResolvConf:
    try:
        return ResolvConf(tuple(str(s) for s in raw.get("nameservers") or ()),
                          float(raw.get("timeout_s", 5.0)), int(raw.get("attempts", 2)),
                          str(raw.get("source", "/etc/resolv.conf")))
    except (TypeError, ValueError):
        return ResolvConf()


def peer_addresses(nodes: Sequence[tuple[int, str]]) -> list[str]:
    """The addresses rank 0 reverse-looks-up: every other rank's, each once (pure)."""
    return list(dict.fromkeys(a for r, a in nodes if r != 0 and a))[:PEERS_TIMED]


def compare_resolvers(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """One ``slow-resolver`` cause per node whose lookups are slow or unanswered (pure)."""
    peers = [(str(n.facts.get("address") or ""), n.host) for n in nodes]
    causes = []
    seen: set[str] = set()
    for n in sorted(nodes, key=lambda n: n.rank):
        raw = n.facts.get("resolver")
        if not isinstance(raw, Mapping) or n.label in seen:
            continue
        found = judge_lookups(_lookups(raw.get("lookups")) + _lookups(raw.get("peer_lookups")),
                              _conf(raw))
        if found is None:
            continue
        seen.add(n.label)
        ranks = tuple(m.rank for m in nodes if m.label == n.label)
        causes.append(Cause(
            id=CAUSE, stage="facts", severity=found.severity, hosts=(n.label,), ranks=ranks,
            detail=f"on {n.label}: {found.why()}",
            fix=f"on {n.label}: {found.fix(peers)}",
            evidence=tuple(f"on {n.label}: {e}" for e in found.evidence()),
            ruled_out=("the network between the nodes: the lookups never leave this node when "
                       "/etc/hosts answers them",),
            data={"per_lookup_s": found.per_lookup_s},
            see_for_yourself="time getent hosts <peer address>; cat /etc/resolv.conf",
        ))
    return causes
