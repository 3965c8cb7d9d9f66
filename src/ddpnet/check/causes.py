"""The cause model: what ``check`` names, where (hosts and ranks) and how to fix it.

Causes are ordered by how early in the stack they break things, so the first failing cause of
a report is the root cause (a missing rank explains a missing matrix row, not the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: every cause id, earliest in the stack first; the order decides the root cause
CAUSE_ORDER: tuple[str, ...] = (
    # a single-node config copied to a cluster: every node knows it before connecting
    "master-loopback",
    # MASTER_ADDR is a bridge address every node has: a worker would connect to itself
    "master-address-local",
    # a link-local MASTER_ADDR without its zone: nothing can bind or dial it as written
    "master-link-local",
    "master-unresolvable",
    "master-no-route",
    "master-port-filtered",
    "master-port-refused",
    "master-port-foreign",
    "port-in-use",
    # a duplicate or a wrong world size explains the "missing" rank it leaves behind
    "duplicate-rank",
    "world-size-mismatch",
    "master-port-mismatch",
    "missing-ranks",
    "name-mismatch",
    "family-mismatch",
    "hostname-loopback",
    # a nameserver that does not answer a node's lookups: a failure when a name the job
    # needs gets no answer, else the seconds it adds to init
    "slow-resolver",
    # one bridge address (docker0's 172.17.0.1) advertised by several hosts
    "duplicate-address",
    # a *_SOCKET_IFNAME that cannot work on a node (net.select): what the others' interface
    # mismatch and the failed group follow from
    "ifname-syntax",
    "ifname-missing",
    "ifname-down",
    "ifname-no-address",
    # the kernel's own path on a node (check.paths): a missing static route, replies that
    # leave by another NIC, reverse-path filtering; each explains the unreachable pairs and
    # the other-subnet finding it causes
    "missing-route",
    "asymmetric-route",
    "reverse-path-drop",
    "interface-mismatch",
    # what gloo/NCCL/TensorPipe really bind, read as each library reads its variable
    "ifname-mismatch",
    # several NICs: ARP flux / rp_filter, NCCL's own choice on another network
    "nic-same-subnet",
    "nccl-auto-interface",
    # a faster network every host has, unused: training works, at the slow one's speed
    "slower-network-chosen",
    # a rank behind a NAT: its connections arrive from an address it does not have
    "behind-nat",
    # the store reached through a VIP/NAT while the advertised addresses are not reachable
    "advertised-unreachable",
    "peer-port-blocked",
    # connections into a node time out although no rule of its own firewall drops them
    "peer-unreachable",
    "version-mismatch",
    "mtu-mismatch",
    # frames of the interfaces' MTU lost on a link: the first big transfer stalls
    "path-mtu",
    # a node that loses a few percent of its packets: what its slow links follow from
    "packet-loss",
    # round trips through a node (or across links) far above the others': what its slow
    # links follow from (TCP's window per round trip), not its NIC (check.latency)
    "high-latency",
    "clock-skew",
    # GPU and NCCL facts (issue 19): a shared GPU explains NCCL's "invalid usage"
    "ranks-share-gpu",
    "nccl-setting-mismatch",
    "gpu-mismatch",
    "cuda-driver-too-old",
    "nccl-net-unavailable",
    "process-group-failed",
    "allreduce-wrong",
    "slow-node",
    "slow-link",
    # a node-level failure no other cause explains: never a pass
    "doctor-failed",
    "stage-timeout",
)


#: how sure a cause is: ``high`` (observed directly), ``medium`` (inferred from several
#: observations), ``low`` (the best explanation of what was seen, others not excluded)
CONFIDENCES: tuple[str, ...] = ("high", "medium", "low")


#: evidence rows a human report shows per cause (a 1000-node cluster has 1000 observations)
SHOWN_EVIDENCE = 8


@dataclass(frozen=True)
class Cause:
    """One named problem. ``severity`` is ``fail`` (training will not work) or ``warn``
    (it will work, slower or fragile).

    A verdict shows what it is worth: ``evidence`` lists the observations it rests on (each
    naming its host), ``ruled_out`` the alternatives excluded and why, ``confidence`` how sure
    it is and ``see_for_yourself`` a command the user can run on the named host to see it."""

    id: str
    detail: str
    fix: str
    hosts: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    severity: str = "fail"
    stage: str = ""
    data: dict[str, Any] = field(default_factory=dict, compare=False)
    evidence: tuple[str, ...] = ()
    ruled_out: tuple[str, ...] = ()
    confidence: str = "high"
    see_for_yourself: str = ""

    def __post_init__(self) -> None:
        # ranks of one host share its label: name each host once ("vm, vm" reads as two)
        object.__setattr__(self, "hosts", tuple(dict.fromkeys(self.hosts)))
        object.__setattr__(self, "evidence", tuple(dict.fromkeys(self.evidence)))
        object.__setattr__(self, "ruled_out", tuple(dict.fromkeys(self.ruled_out)))
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"confidence {self.confidence!r} is not one of {CONFIDENCES}")

    def shown_evidence(self, limit: int = SHOWN_EVIDENCE) -> tuple[tuple[str, str], ...]:
        """(label, text) rows the text and HTML renderers both show under the fix: what the
        verdict rests on (the first ``limit`` observations: ``--json`` has them all), what
        was excluded, how sure it is and how to see it (pure)."""
        rows = [("evidence", e) for e in self.evidence[:limit]]
        if len(self.evidence) > limit:
            rows.append(("evidence", f"and {len(self.evidence) - limit} more (--json lists "
                                     "every one)"))
        rows += [("ruled out", r) for r in self.ruled_out]
        if rows:  # a bare default confidence says nothing
            rows.append(("confidence", self.confidence))
        if self.see_for_yourself:
            rows.append(("see it yourself", self.see_for_yourself))
        return tuple(rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "stage": self.stage,
            "hosts": list(self.hosts),
            "ranks": list(self.ranks),
            "detail": self.detail,
            "fix": self.fix,
            "evidence": list(self.evidence),
            "ruled_out": list(self.ruled_out),
            "confidence": self.confidence,
            "see_for_yourself": self.see_for_yourself,
        }


#: what a user runs, on the rank's own host, to see a failure to reach rank 0 for themselves
SEE_JOIN: dict[str, str] = {
    "master-unresolvable": "getent ahosts $MASTER_ADDR",
    "master-loopback": "getent ahosts $MASTER_ADDR; echo $WORLD_SIZE $LOCAL_WORLD_SIZE",
    "master-address-local": "ip -br addr | grep -w $MASTER_ADDR",
    "master-link-local": "ip -6 -br addr show scope link; ip -6 route get $MASTER_ADDR",
    "master-no-route": "ip route get $MASTER_ADDR; ip neigh show $MASTER_ADDR",
    "master-port-filtered": "nc -zv -w 3 $MASTER_ADDR $MASTER_PORT",
    "master-port-refused": "nc -zv -w 3 $MASTER_ADDR $MASTER_PORT",
    "master-port-foreign": "ss -ltnp sport = :$MASTER_PORT  # on rank 0's host",
    # every state, not only listeners: an outgoing connection's source port holds it too
    "port-in-use": "ss -tanp sport = :$MASTER_PORT; sysctl net.ipv4.ip_local_port_range",
}


def join_cause(cause: str, message: str, hint: str, host: str, rank: int,
               detail: str = "") -> Cause:
    """A rank's own failure to join (a ``RendezvousError``) as a cause with its evidence."""
    return Cause(cause, message, hint, hosts=(host,), ranks=(rank,), stage="rendezvous",
                 evidence=(f"rank {rank} on {host}: {detail or message}",),
                 see_for_yourself=SEE_JOIN.get(cause, "ddpnet doctor"))


#: what the user's own job would hit where the hostname decides gloo's address: a plain
#: ``init_process_group("gloo")`` binds what the hostname resolves to (torch.distributed.rpc's
#: TensorPipe too); NCCL picks its own interface
PLAIN_JOB_BREAKS = ("breaks gloo in a plain init_process_group job, e.g. torchrun without "
                    "GLOO_SOCKET_IFNAME, and TensorPipe's rpc; NCCL picks its interface "
                    "itself")
#: a warning: ddpnet.init()/launch and a pinned GLOO_SOCKET_IFNAME avoid it (check's own run
#: pins it too); a variable the job itself sets that breaks is a failure (``ifname-*``)
PLAIN_JOB_SEVERITY = "warn"


def _order(cause: Cause) -> tuple[int, int]:
    rank = CAUSE_ORDER.index(cause.id) if cause.id in CAUSE_ORDER else len(CAUSE_ORDER)
    return (0 if cause.severity == "fail" else 1, rank)


def sort_causes(causes: list[Cause] | tuple[Cause, ...]) -> tuple[Cause, ...]:
    """Failures before warnings, earliest layer first: element 0 is the root cause."""
    return tuple(sorted(causes, key=_order))


def host_label(host: str, address: str) -> str:
    """Hosts are named by hostname and address: hostnames repeat (containers, clones)."""
    if address and address != host:
        return f"{host} ({address})"
    return host
