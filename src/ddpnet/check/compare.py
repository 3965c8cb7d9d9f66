"""Stage 2, pure part: compare the facts every rank published.

Facts are the doctor's keys (``python torch cuda nccl hostname hostname_loopback interface
address mtu subnet time``) plus ``clock_offset_s`` measured by each rank against rank 0's
clock at the start signal (``stages.rendezvous``). Missing keys are not compared (an older
doctor, a CPU node).
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.check.causes import PLAIN_JOB_BREAKS, PLAIN_JOB_SEVERITY, Cause, host_label
from ddpnet.net.names import is_loopback
from ddpnet.output import rank_ranges

#: a clock further off than this breaks timeouts, logs and NCCL's watchdog reasoning
CLOCK_SKEW_LIMIT_S = 1.0
#: what a skewed clock does not break (read from torch 2.13: every c10d, gloo and NCCL
#: timeout is a monotonic-clock deadline on the waiting rank's own host)
#: torchrun's c10d/etcd rendezvous expires a node whose wall-clock heartbeat is older than
#: keep_alive_interval x keep_alive_max_attempt (5 s x 3 in torch 2.13's dynamic_rendezvous)
TORCHRUN_EXPIRY_S = 15.0
CLOCK_RULED_OUT = ("a hang of the process group: torch's store, gloo and NCCL timeouts (and "
                   "NCCL's watchdog) are each rank's own steady clock, never compared across "
                   "hosts; the skew misleads logs, traces and TLS certificate checks")
VERSION_KEYS = ("torch", "python", "cuda", "nccl")


@dataclass(frozen=True)
class NodeFacts:
    rank: int
    facts: Mapping[str, Any]

    @property
    def host(self) -> str:
        return str(self.facts.get("hostname", "?"))

    @property
    def label(self) -> str:
        return host_label(self.host, str(self.facts.get("address", "")))


def _groups(nodes: Sequence[NodeFacts], key: str) -> dict[str, list[NodeFacts]]:
    out: dict[str, list[NodeFacts]] = defaultdict(list)
    for n in nodes:
        value = n.facts.get(key)
        if value is None or value == "":
            continue
        out[str(value)].append(n)
    return dict(out)


def _minority(groups: dict[str, list[NodeFacts]], reference: str | None) -> list[str]:
    """Values other than the majority (rank 0's value breaks ties)."""
    def weight(v: str) -> tuple[int, int]:
        return (len(groups[v]), 1 if v == reference else 0)

    majority = max(groups, key=weight)
    return [v for v in groups if v != majority]


def _describe(groups: dict[str, list[NodeFacts]], key: str) -> str:
    parts = []
    for value, nodes in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ranks = ",".join(str(n.rank) for n in nodes)
        parts.append(f"{key} {value} on rank(s) {ranks}")
    return "; ".join(parts)


def compare_versions(nodes: Sequence[NodeFacts]) -> list[Cause]:
    causes = []
    ref = {k: str(nodes[0].facts.get(k)) for k in VERSION_KEYS} if nodes else {}
    for key in VERSION_KEYS:
        groups = _groups(nodes, key)
        if len(groups) < 2:
            continue
        odd_values = _minority(groups, ref.get(key))
        odd = [n for v in odd_values for n in groups[v]]
        majority = next(v for v in groups if v not in odd_values)
        pkg = {"torch": f"torch=={majority}", "python": f"python {majority}",
               "cuda": f"a torch build for CUDA {majority}",
               "nccl": f"the torch build bundling NCCL {majority}"}[key]
        causes.append(Cause(
            id="version-mismatch",
            stage="facts",
            hosts=tuple(n.label for n in odd),
            ranks=tuple(n.rank for n in odd),
            detail=f"{key} differs between ranks: {_describe(groups, key)}",
            fix=f"install {pkg} on {', '.join(n.label for n in odd)} "
                f"(e.g. pip install torch=={nodes[0].facts.get('torch')}) so every node "
                "runs the same build",
            data={"key": key},
            evidence=(*(f"rank {n.rank} on {n.label}: {key} {n.facts.get(key)}" for n in odd),
                      f"{len(groups[majority])} other rank(s): {key} {majority}"),
            see_for_yourself="python -c 'import torch, sys; print(torch.__version__, "
                             "torch.version.cuda, sys.version.split()[0])'",
        ))
    return causes


def compare_mtu(nodes: Sequence[NodeFacts]) -> list[Cause]:
    groups = _groups(nodes, "mtu")
    if len(groups) < 2:
        return []
    odd_values = _minority(groups, str(nodes[0].facts.get("mtu")))
    odd = [n for v in odd_values for n in groups[v]]
    majority = next(v for v in groups if v not in odd_values)
    fixes = "; ".join(
        f"on {n.label}: ip link set dev {n.facts.get('interface', 'IFACE')} mtu {majority}"
        for n in odd
    )
    return [Cause(
        id="mtu-mismatch",
        stage="facts",
        hosts=tuple(n.label for n in odd),
        ranks=tuple(n.rank for n in odd),
        detail=f"MTU of the selected interfaces differs: {_describe(groups, 'mtu')}; large "
               "packets are dropped between them, so big transfers stall while small ones pass",
        fix=fixes + " (or raise the MTU everywhere, switches included)",
        evidence=(*(f"rank {n.rank} on {n.label}: {n.facts.get('interface')} mtu "
                    f"{n.facts.get('mtu')}" for n in odd),
                  f"{len(groups[majority])} other rank(s): mtu {majority}"),
        see_for_yourself="ip -br link  # the mtu column, on each node",
    )]


def _torchrun(nodes: Sequence[NodeFacts]) -> bool:
    """Whether this check runs under torchrun (its c10d rendezvous hands out the job)."""
    return any((n.facts.get("names") or {}).get("launcher") == "torchrun" for n in nodes)


@dataclass(frozen=True)
class HostClock:
    """One host's clock against rank 0's: the least of its ranks' readings. Each reading is
    the rank's wall clock when rank 0's plan reached it minus rank 0's when it was published:
    the true offset plus that delivery's delay, never less, so the least-delayed rank on the
    host is the nearest (the ranks of one host share one clock)."""

    label: str
    offset: float
    ranks: tuple[int, ...]


def host_clocks(nodes: Sequence[NodeFacts]) -> list[HostClock]:
    """Every host that measured its clock, ranks grouped by host (pure)."""
    readings: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for n in nodes:
        offset = n.facts.get("clock_offset_s")
        if isinstance(offset, (int, float)) and not isinstance(offset, bool):
            readings[n.label].append((float(offset), n.rank))
    return [HostClock(label, min(o for o, _ in found), tuple(sorted(r for _, r in found)))
            for label, found in readings.items()]


#: hosts a clock-skew detail names (the detail is in every rank's line; the evidence has all)
CLOCK_SHOWN = 8


def _clock_detail(odd: Sequence[HostClock], limit_s: float, expired: bool,
                  torchrun: bool) -> str:
    worst = sorted(odd, key=lambda h: -abs(h.offset))
    named = ", ".join(f"{h.label} {h.offset:+.2f} s (rank(s) {rank_ranges(h.ranks)})"
                      for h in worst[:CLOCK_SHOWN])
    more = f" and {len(worst) - CLOCK_SHOWN} more host(s)" if len(worst) > CLOCK_SHOWN else ""
    return (f"clocks differ from rank 0's by more than {limit_s:g} s on {len(odd)} host(s): "
            f"{named}{more}; gloo, NCCL and the store are not hit (each rank times out on "
            "its own steady clock)"
            + (f"; torchrun's c10d/etcd rendezvous is (more than {TORCHRUN_EXPIRY_S:g} s: "
               "each node writes its keep-alive heartbeat as its own wall-clock time and the "
               "others expire it by theirs, so nodes are dropped as dead: a group of the "
               "wrong size, or agents that hang)"
               + ("" if torchrun else ", if the job uses it") if expired else ""))


def compare_clock(nodes: Sequence[NodeFacts], limit_s: float = CLOCK_SKEW_LIMIT_S) -> list[Cause]:
    """``clock-skew``: a warning past ``limit_s``; a failure past torchrun's heartbeat expiry
    when the job runs under torchrun (the c10d rendezvous compares wall clocks across nodes).
    Judged per host (:func:`host_clocks`): a rank that read the plan late from a busy store
    is not a skewed clock while another rank of its host read it in time."""
    odd = [h for h in host_clocks(nodes) if abs(h.offset) > limit_s]
    if not odd:
        return []
    expired = any(abs(h.offset) > TORCHRUN_EXPIRY_S for h in odd)
    torchrun = _torchrun(nodes)
    return [Cause(
        id="clock-skew",
        stage="facts",
        severity="fail" if expired and torchrun else "warn",
        hosts=tuple(h.label for h in odd),
        ranks=tuple(sorted(r for h in odd for r in h.ranks)),
        detail=_clock_detail(odd, limit_s, expired, torchrun),
        fix="enable time sync on every node: timedatectl set-ntp true "
            "(or systemctl enable --now chronyd)",
        evidence=tuple(f"{h.label}: clock {h.offset:+.2f} s from rank 0's, the least of its "
                       f"rank(s) {rank_ranges(h.ranks)}' readings over the store at the start "
                       "signal" for h in odd)
                 + ((f"launched by torchrun: its rendezvous expires heartbeats after "
                     f"{TORCHRUN_EXPIRY_S:g} s",) if torchrun else ()),
        ruled_out=(CLOCK_RULED_OUT,),
        confidence="medium",
        see_for_yourself="timedatectl status  # 'System clock synchronized: yes', each node",
    )]


def _network(facts: Mapping[str, Any]) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    subnet = facts.get("subnet")
    try:
        if subnet:
            return ipaddress.ip_network(str(subnet), strict=False)
    except ValueError:
        return None
    return None


def compare_network(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """hostname-loopback and interface-mismatch: only meaningful across several hosts."""
    hosts = {n.host for n in nodes}
    multi = len(hosts) > 1 or len({str(n.facts.get("address")) for n in nodes}) > 1
    if not multi:
        return []
    family = _families(nodes)
    found = (_loopback_address(nodes) or _loopback_hostname(nodes),
             family or _subnets(nodes))  # other families are other subnets: name the cause
    return [c for c in found if c is not None]


def _version(address: Any) -> int | None:
    try:
        return ipaddress.ip_address(str(address)).version
    except ValueError:
        return None


def _resolved_here(n: NodeFacts) -> str:
    seen = (n.facts.get("names") or {}).get("master")
    if isinstance(seen, Mapping) and seen.get("name") and not _literal(str(seen["name"])):
        return (f" (MASTER_ADDR {seen['name']} resolves there to "
                f"{', '.join(map(str, seen.get('addresses') or ())) or 'nothing'})")
    return ""


def _families(nodes: Sequence[NodeFacts]) -> Cause | None:
    """Ranks advertising addresses of different IP families (a name resolving to IPv6 on
    some nodes and IPv4 on others): gloo/NCCL cannot connect an IPv6 rank to an IPv4 one."""
    groups: dict[int, list[NodeFacts]] = defaultdict(list)
    for n in nodes:
        version = _version(n.facts.get("address"))
        if version is not None and not is_loopback(n.facts.get("address")):
            groups[version].append(n)
    if len(groups) < 2:
        return None
    major = max(groups, key=lambda v: (len(groups[v]), any(n.rank == 0 for n in groups[v])))
    odd = [n for v, ns in groups.items() if v != major for n in ns]
    return Cause(
        id="family-mismatch",
        stage="facts",
        hosts=tuple(n.label for n in odd),
        ranks=tuple(n.rank for n in odd),
        detail="ranks advertise different IP families: "
               + "; ".join(f"rank {n.rank} IPv{_version(n.facts.get('address'))} "
                           f"{n.facts.get('address')}{_resolved_here(n)}" for n in odd)
               + f"; the other {len(groups[major])} rank(s) IPv{major}",
        fix="make MASTER_ADDR resolve to one family on every node: use rank 0's IPv"
            f"{major} address (export MASTER_ADDR=<it>), or fix the name's lines in "
            f"/etc/hosts / DNS on {', '.join(n.label for n in odd)} (`getent ahosts NAME`)",
        evidence=(*(f"rank {n.rank} on {n.label} advertises {n.facts.get('address')} "
                    f"(IPv{_version(n.facts.get('address'))}){_resolved_here(n)}" for n in odd),
                  f"{len(groups[major])} other rank(s) advertise IPv{major} addresses"),
        ruled_out=("a firewall or route: an IPv4 socket cannot connect to an IPv6 address at "
                   "all, whatever the network",),
        see_for_yourself="getent ahosts $MASTER_ADDR; ip -br addr",
    )


def _loopback_address(nodes: Sequence[NodeFacts]) -> Cause | None:
    """A rank whose selected address is loopback: peers would connect to themselves."""
    loop = [n for n in nodes if is_loopback(n.facts.get("address"))]
    if not loop:
        return None
    return Cause(
        id="hostname-loopback",
        stage="facts",
        hosts=tuple(n.label for n in loop),  # clones share a hostname: name them by address
        ranks=tuple(n.rank for n in loop),
        detail="the address peers would use for "
               + ", ".join(f"rank {n.rank} on {n.label} is {n.facts.get('address')} "
                           f"(interface {n.facts.get('interface')})" for n in loop)
               + ": a loopback address, so other nodes connect to themselves and "
               "gloo/NCCL hang",
        fix="point the hostname at the node's real address in /etc/hosts (not 127.0.1.1) "
            "and unset GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME=lo, or pin the cluster "
            "interface: export GLOO_SOCKET_IFNAME=<iface> NCCL_SOCKET_IFNAME=<iface>",
        evidence=(*(f"rank {n.rank} on {n.label} advertises {n.facts.get('address')} "
                    f"(interface {n.facts.get('interface')})" for n in loop),
                  f"{len({m.host for m in nodes})} hosts in the job"),
        ruled_out=("one host: the ranks are on several hosts, where loopback reaches only "
                   "the rank's own",),
        see_for_yourself="getent ahosts $(hostname); echo $GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME",
    )


def _loopback_hostname(nodes: Sequence[NodeFacts]) -> Cause | None:
    """The hostname resolves to loopback where nothing pins the interface: a warning."""
    named = [n for n in nodes if n.facts.get("hostname_loopback") is True
             and not n.facts.get("interface_pinned")]
    if not named:
        return None
    return Cause(
        id="hostname-loopback",
        stage="facts",
        severity=PLAIN_JOB_SEVERITY,
        hosts=tuple(n.label for n in named),
        ranks=tuple(n.rank for n in named),
        detail="hostname resolves to a loopback address on "
               + ", ".join(n.label for n in named)
               + "; gloo without GLOO_SOCKET_IFNAME would advertise 127.x to peers, which "
               f"hang connecting to themselves ({PLAIN_JOB_BREAKS})",
        fix="edit /etc/hosts so the hostname maps to the cluster address, or keep "
            "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME pinned (ddpnet.init() does)",
        evidence=tuple(f"on {n.label}: {n.host} resolves to "
                       + ", ".join(map(str, n.facts.get("hostname_addresses") or ["loopback"]))
                       + " (gloo binds the first); this check bound "
                       f"{n.facts.get('interface')} {n.facts.get('address')}" for n in named),
        ruled_out=("a failure of this check or of a ddpnet.init() job: both pin the "
                   "interface (this check's own group worked); only a job without "
                   "GLOO_SOCKET_IFNAME (plain init_process_group) hangs",),
        see_for_yourself="getent ahosts $(hostname)",
    )


def _subnets(nodes: Sequence[NodeFacts]) -> Cause | None:
    """Selected interfaces in more than one network: the minority is named."""
    nets = [(n, _network(n.facts)) for n in nodes if not is_loopback(n.facts.get("address"))]
    if len(nets) < 2 or any(net is None for _, net in nets):
        return None
    groups: dict[str, list[NodeFacts]] = defaultdict(list)
    for n, net in nets:
        groups[str(net)].append(n)
    if len(groups) <= 1:
        return None
    majority = max(groups, key=lambda k: (len(groups[k]), any(n.rank == 0
                                                                for n in groups[k])))
    odd = [n for k, ns in groups.items() if k != majority for n in ns]
    return Cause(
        id="interface-mismatch",
        stage="facts",
        hosts=tuple(n.label for n in odd),
        ranks=tuple(n.rank for n in odd),
        detail="selected interfaces are not in one network: "
               + "; ".join(
                   f"{k}: " + ", ".join(
                       f"rank {n.rank} {n.facts.get('interface')} "
                       f"{n.facts.get('address')}" for n in ns)
                   for k, ns in groups.items()),
        fix=f"select the interface in {majority} on "
            + ", ".join(n.label for n in odd)
            + ": export GLOO_SOCKET_IFNAME=<iface> NCCL_SOCKET_IFNAME=<iface> "
            "(or route the networks to each other)",
        data={"subnets": True},  # settled with the mesh (check.nat.settle_subnets)
        evidence=tuple(f"rank {n.rank} on {n.label}: {n.facts.get('interface')} "
                       f"{n.facts.get('address')} in {k}" for k, ns in groups.items()
                       for n in ns),
        confidence="medium",  # settled with the mesh: routed networks are not a failure
        see_for_yourself="ip -br addr; ip route get <a peer's address>",
    )


def compare_selection(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """Interface variables a rank set that cannot work across nodes (``ddpnet.net`` names
    them, e.g. GLOO_SOCKET_IFNAME=lo is ``hostname-loopback``), grouped by cause."""
    by_cause: dict[str, list[tuple[NodeFacts, str, str]]] = defaultdict(list)
    for n in nodes:
        for problem in n.facts.get("selection_problems") or ():
            cause, what, fix = [*list(problem), "", "", ""][:3]
            by_cause[str(cause)].append((n, str(what), str(fix)))
    causes = []
    for cause, items in by_cause.items():
        causes.append(Cause(
            id=cause or "interface-mismatch",
            stage="facts",
            hosts=tuple(dict.fromkeys(n.label for n, _, _ in items)),
            ranks=tuple(dict.fromkeys(n.rank for n, _, _ in items)),
            detail="; ".join(f"rank {n.rank} on {n.label}: {what}" for n, what, _ in items),
            fix=items[0][2] or "unset the interface variable or name the cluster interface",
            evidence=tuple(f"rank {n.rank} on {n.label}: {what}" for n, what, _ in items),
            see_for_yourself="ddpnet env  # the network.variables rows, on the named host",
        ))
    return causes


def _literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _wrong_resolution(n: NodeFacts, key: str, rank0: set[str]) -> tuple[str, str] | None:
    """(name, what it resolves to here) when ``key``'s name does not lead to rank 0 on node
    ``n``: unresolvable, loopback first, or first an address rank 0 does not have."""
    seen = (n.facts.get("names") or {}).get(key)
    if not isinstance(seen, Mapping) or not seen.get("name") or _literal(str(seen["name"])):
        return None
    addrs = [str(a) for a in seen.get("addresses") or ()]
    if not addrs:
        return str(seen["name"]), f"nothing ({seen.get('error') or 'no address'})"
    if is_loopback(addrs[0]) or addrs[0] not in rank0:
        return str(seen["name"]), ", ".join(addrs)
    return None


def compare_names(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """Name resolution is per node: on every node other than rank 0's host, MASTER_ADDR and
    rank 0's hostname must resolve first to an address of rank 0. One worker's stale or
    loopback /etc/hosts entry is named for that worker, not judged from rank 0's view."""
    ref = next((n for n in nodes if n.rank == 0), None)
    if ref is None:
        return []
    rank0 = {str(a) for a in ref.facts.get("own_addresses") or ()} | {
        str(ref.facts.get("address"))}
    bad: dict[str, list[tuple[NodeFacts, str]]] = defaultdict(list)
    for n in nodes:
        if n.rank == 0 or str(n.facts.get("address")) in rank0:
            continue  # rank 0's own host reaches itself whatever its names say
        for key in ("master", "host0"):
            wrong = _wrong_resolution(n, key, rank0)
            if wrong is not None and all(m.rank != n.rank for m, _ in bad[wrong[0]]):
                bad[wrong[0]].append((n, wrong[1]))  # MASTER_ADDR may be rank 0's hostname
    return [_name_cause(name, items, ref, nodes) for name, items in bad.items()]


def _name_cause(name: str, items: list[tuple[NodeFacts, str]], ref: NodeFacts,
                nodes: Sequence[NodeFacts]) -> Cause:
    target = str(ref.facts.get("address"))
    odd = [n for n, _ in items]
    fatal = any("nothing" in what or is_loopback(what.split(",")[0]) for _, what in items)
    torchrun = _torchrun(nodes)
    is_master = name == (ref.facts.get("names") or {}).get("master", {}).get("name")
    return Cause(
        id="name-mismatch",
        stage="facts",
        severity="fail" if fatal and (is_master or torchrun) else "warn",
        hosts=tuple(n.label for n in odd),
        ranks=tuple(n.rank for n in odd),
        detail=f"{name} (rank 0's {'MASTER_ADDR' if is_master else 'hostname'}, "
               f"{target} on rank 0) resolves differently on "
               + "; ".join(f"rank {n.rank} on {n.label}: to {what}" for n, what in items)
               + ("; torchrun's rendezvous hands this name to the workers" if not is_master
                  else ""),
        fix="; ".join(f"on {n.label}: make {name} resolve to {target} (`getent hosts "
                      f"{name}` there; fix or remove its line in /etc/hosts, or its DNS)"
                      for n in odd)
            + f"; or use addresses: export MASTER_ADDR={target}",
        evidence=(f"on rank 0 ({ref.label}): {name} is {target}",
                  *(f"on {n.label}: {name} resolves to {what}" for n, what in items)),
        ruled_out=("rank 0's view: names resolve per node, so each node's own lookup is "
                   "what its connect uses",),
        see_for_yourself=f"getent ahosts {name}  # on each named host",
    )


#: the doctor's checks whose fact ``check`` judges itself, across the nodes (which ranks share
#: a host, which interface check pinned), each with the causes that carry that fact: the
#: doctor's verdict on them is never a second cause nor a second severity (one fact, one
#: cause): a hostname on 127.0.1.1 is ``hostname-loopback`` (a warning where the interface is
#: pinned), and every rank on one host over loopback is right, whatever one node's doctor says
JUDGED_BY_CHECK: dict[str, tuple[str, ...]] = {
    "names.hostname": ("hostname-loopback", "family-mismatch", "duplicate-address"),
    "names.master": ("master-unresolvable", "master-loopback", "master-no-route",
                     "name-mismatch", "family-mismatch"),
    "interfaces.selected": ("ifname-missing", "ifname-down", "ifname-no-address",
                            "hostname-loopback", "interface-mismatch"),
    "environment.ifname": ("ifname-syntax", "ifname-missing", "ifname-down",
                           "ifname-no-address", "hostname-loopback", "ifname-mismatch"),
    # timed on every node, rank 0's own lookups of its peers added (check.resolvers)
    "names.resolver": ("slow-resolver",),
}


def doctor_failures(n: NodeFacts) -> list[str]:
    """The doctor's failed checks of node ``n`` that no cause of ``check`` judges (pure)."""
    failed = (n.facts.get("doctor") or {}).get("failed") or ()
    return [str(i) for i in failed if str(i) not in JUDGED_BY_CHECK]


def doctor_as_judged(summary: Any, rank: int, causes: Sequence[Cause]) -> Any:
    """The node table's doctor summary for ``rank`` with the checks ``check`` judges itself
    moved from ``failed`` to ``judged`` (check id -> the cause naming this rank, or ``pass``),
    so the table and the causes tell one story (pure)."""
    if not isinstance(summary, Mapping):
        return summary
    failed = [str(i) for i in summary.get("failed") or ()]
    judged = {i: next((f"{c.id} ({c.severity})" for c in causes
                       if c.id in JUDGED_BY_CHECK[i] and rank in c.ranks), "pass")
              for i in failed if i in JUDGED_BY_CHECK}
    if not judged:
        return summary
    kept = [i for i in failed if i not in judged]
    verdict = summary.get("verdict")
    return {**summary, "failed": kept, "judged": judged,
            "verdict": verdict if kept or verdict != "fail" else "warn"}


def compare_doctor(nodes: Sequence[NodeFacts], named: set[int]) -> list[Cause]:
    """No false pass: a rank whose facts could not be gathered, or whose doctor failed
    checks that no cause of this check judges, is a cause naming it (unless another cause
    already names that rank). Hosts are named by label: clones share a hostname."""
    broken = [n for n in nodes if n.rank not in named and n.facts.get("error")]
    failed = [n for n in nodes if n.rank not in named and not n.facts.get("error")
              and doctor_failures(n)]
    causes = []
    if broken:
        causes.append(Cause(
            id="doctor-failed", stage="facts",
            hosts=tuple(n.label for n in broken), ranks=tuple(n.rank for n in broken),
            detail="; ".join(f"rank {n.rank} on {n.label}: {n.facts['error']}"
                             for n in broken) + " (this rank's node was not compared)",
            fix="run `ddpnet doctor` on " + ", ".join(dict.fromkeys(n.label for n in broken))
                + " to see what fails there",
            evidence=tuple(f"rank {n.rank} on {n.label}: {n.facts['error']}" for n in broken),
            confidence="medium",
            see_for_yourself="ddpnet doctor",
        ))
    if failed:
        causes.append(Cause(
            id="doctor-failed", stage="facts",
            hosts=tuple(n.label for n in failed), ranks=tuple(n.rank for n in failed),
            detail="; ".join(f"rank {n.rank} on {n.label}: doctor checks failed: "
                             + ", ".join(doctor_failures(n)) for n in failed),
            fix="run `ddpnet doctor` on " + ", ".join(dict.fromkeys(n.label for n in failed))
                + " for each check's evidence and fix (a resolver or probe that only times "
                "out under load shows there as a timeout: rerun to tell)",
            evidence=tuple(f"rank {n.rank} on {n.label}: doctor check {i} failed"
                           for n in failed for i in doctor_failures(n)),
            ruled_out=(f"{', '.join(JUDGED_BY_CHECK)}: judged by check itself across the "
                       "nodes, named by their own causes if wrong",),
            see_for_yourself="ddpnet doctor --json",
        ))
    return causes


def compare_facts(nodes: Sequence[NodeFacts]) -> list[Cause]:
    """Every facts comparison, in report order."""
    nodes = sorted(nodes, key=lambda n: n.rank)
    selection = compare_selection(nodes)
    network = [c for c in compare_network(nodes)
               if not any(s.id == c.id for s in selection)]
    found = [*selection, *compare_names(nodes), *network, *compare_versions(nodes),
             *compare_mtu(nodes), *compare_clock(nodes)]
    named = {r for c in found if c.severity == "fail" for r in c.ranks}
    return [*found, *compare_doctor(nodes, named)]
