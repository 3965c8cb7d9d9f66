"""Stage 2: every rank publishes its facts (the doctor's, plus the interface this check
selected), rank 0 compares them (``check.compare``) and fills the node table.

The facts are gathered in a thread while the rank joins (the doctor: ~20 ms of CPU, and the
waits of its tools and name lookups)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from ddpnet.check.causes import Cause
from ddpnet.check.compare import NodeFacts, compare_facts, doctor_as_judged
from ddpnet.check.containers import compare_addresses, netns_id
from ddpnet.check.context import Findings, RankContext, in_thread
from ddpnet.check.gpu import compare_gpus, gpu_facts
from ddpnet.check.hostaddr import compare_hostname_addresses, plain_job
from ddpnet.check.ifvars import compare_picks
from ddpnet.check.nics import compare_nics, nic_facts
from ddpnet.check.resolvers import compare_resolvers, peer_addresses
from ddpnet.check.stages.pathmtu import master_paths
from ddpnet.check.store import StageTimeout
from ddpnet.config import DistConfig
from ddpnet.doctor.base import CheckResult, worst
from ddpnet.net.interfaces import Interface
from ddpnet.net.resolver import time_lookups
from ddpnet.net.select import GLOO, TP, Selection

#: facts of each rank that the node table shows
NODE_KEYS = ("python", "torch", "cuda", "nccl", "mtu", "subnet", "hostname_loopback",
             "clock_offset_s", "doctor", "interface_why")


def selection_problems(sel: Selection) -> list[list[str]]:
    """(cause, what, fix) for each interface variable that cannot work (e.g.
    GLOO_SOCKET_IFNAME=lo across nodes): rank 0 names it with the host (pure). A broken
    TP_SOCKET_IFNAME breaks only torch.distributed.rpc, but the user set it for a reason (and
    the doctor fails it): named with its own cause rather than as doctor-failed."""
    return [[c.cause, f"{var}={c.value}: {c.reason}"
             + (" (TensorPipe: torch.distributed.rpc's init_rpc fails)" if var == TP else ""),
             c.hint] for var, c in sel.problems().items()]


def selection_facts(sel: Selection) -> dict[str, Any]:
    """The interface and address this check uses, and whether the user pinned it (pure)."""
    return {"interface": str(sel.interface), "address": sel.address,
            "interface_pinned": sel.gloo.source != "auto" and sel.gloo.ok,
            "selection_problems": selection_problems(sel)}


def interface_facts(sel: Selection, interfaces: Sequence[Interface]) -> dict[str, Any]:
    """MTU and subnet of the selected interface and address (pure): what the ranks compare
    is the network this check uses, whatever the doctor selected."""
    iface = next((i for i in interfaces if i.name == sel.interface), None)
    if iface is None:
        return {"mtu": None, "subnet": None}
    subnet = next((str(a.network()) for a in iface.addresses if a.ip == sel.address), None)
    return {"mtu": iface.mtu, "subnet": subnet}


def node_facts(cfg: DistConfig, sel: Selection, environ: Mapping[str, str]) -> dict[str, Any]:
    """This node's facts: the doctor's (versions, MTU, names, clock), with the interface
    facts this check selected and uses (edge). Gathered once the rank's torch import is done
    (it runs while the rank joins): torch's native libraries hold the GIL for ~0.2 s of CPU
    while they load, seconds where N ranks share few cores, and the doctor's 1 s name
    lookups running beside that timed out (a false ``doctor-failed``)."""
    from ddpnet.check.gpu import nccl_facts
    from ddpnet.check.torchimport import wait_imported
    from ddpnet.doctor.base import Host
    from ddpnet.doctor.run import run_doctor
    from ddpnet.net.interfaces import list_interfaces

    wait_imported(TORCH_WAIT_S)  # gathered all the same if it never comes
    table = list_interfaces()
    base = {**selection_facts(sel), **interface_facts(sel, table), **nccl_facts(environ),
            **binding_facts(environ, table),
            **nic_facts(table, sel.gloo.source, sel.gloo.reason, Host().sysctl),
            "netns": netns_id()}
    report = run_doctor(cfg=cfg, environ=environ, torch_probe=torch_in_process)
    merged = {**base, **{k: v for k, v in dict(report.facts).items() if v is not None}}
    for key in ("interface", "address", "interface_pinned"):
        merged[key] = base[key]
    merged["doctor"] = doctor_summary(report.checks)
    # the firewall as the doctor read and evaluated it: before the mesh blames a firewall
    merged["firewall_checks"] = {c.id: c.status for c in report.checks
                                 if c.id.startswith("firewall.")}
    return merged


def torch_in_process() -> dict[str, Any]:
    """The doctor's torch facts from this rank's own torch import, once the main thread has
    it (edge): without it a node whose facts are not cached yet starts a second interpreter
    that imports torch again (~1.5 s of CPU per node, while N nodes share the cores)."""
    from ddpnet.check.torchimport import wait_imported
    from ddpnet.doctor.software import torch_summary

    if not wait_imported(TORCH_WAIT_S):
        return {"probe_error": f"this rank did not import torch in {TORCH_WAIT_S:.0f} s"}
    return torch_summary()


#: how long the doctor's torch facts wait for the rank's own torch import
TORCH_WAIT_S = 30.0


def binding_facts(environ: Mapping[str, str], interfaces: Sequence[Interface],
                  order: Sequence[str] | None = None) -> dict[str, Any]:
    """What gloo/NCCL/TensorPipe really bind here (``net.picks``) and every address of this
    host's interfaces but loopback and link-local: rank 0 compares them across nodes."""
    from ddpnet.net.interfaces import kernel_order
    from ddpnet.net.picks import library_picks

    picks = library_picks(environ, interfaces, kernel_order() if order is None else order)
    return {"library_picks": [p.to_dict() for p in picks],
            "ifaddrs": {i.name: [str(a) for a in i.addresses
                                 if not a.is_loopback and not a.is_link_local]
                        for i in interfaces if i.kind != "loopback"}}


def doctor_summary(checks: Sequence[CheckResult]) -> dict[str, Any]:
    """The doctor's verdict as check shows it (pure). rendezvous.* raced with this very
    rendezvous and check's own stage supersedes them, so they are left out of both the
    verdict and the failed list: a "fail" always names what failed (issue 19)."""
    kept = [c for c in checks if not c.id.startswith("rendezvous.")]
    summary: dict[str, Any] = {
        "verdict": worst([c.status for c in kept]),
        "failed": [c.id for c in kept if c.status == "fail"],
    }
    superseded = [c.id for c in checks if c not in kept and c.status == "fail"]
    if superseded:
        summary["superseded"] = superseded
    return summary


#: one name lookup's bound: /etc/hosts answers in microseconds, a dead DNS server in seconds
NAME_TIMEOUT_S = 2.0


def name_facts(master_addr: str, host0: str, launcher: str,
               resolve: Any = None) -> dict[str, Any]:
    """What MASTER_ADDR and rank 0's hostname (the name torchrun's c10d rendezvous
    advertises) resolve to *on this node* (edge: two bounded lookups); rank 0 compares."""
    from ddpnet.net.names import resolve_host

    lookup = resolve or resolve_host
    out: dict[str, Any] = {"launcher": launcher}
    for key, name in (("master", master_addr), ("host0", host0)):
        if not name:
            continue
        res = lookup(name, timeout=NAME_TIMEOUT_S)
        out[key] = {"name": name, "addresses": list(res.addresses), "error": res.error}
    return out


def own_addresses() -> list[str]:
    """Every address of this host's interfaces (edge): rank 0's names may resolve to any."""
    from ddpnet.net.interfaces import list_interfaces

    return [a.ip for i in list_interfaces() for a in i.addresses if not a.is_link_local]


def _host0(ctx: RankContext) -> str:
    if ctx.rank == 0:
        return ctx.host
    try:
        return str(ctx.store.get("host0", NAME_TIMEOUT_S))
    except StageTimeout:  # an older rank 0: compare MASTER_ADDR only
        return ""


def record(ctx: RankContext, clock_offset: float | None) -> dict[str, Any]:
    """What this rank publishes: its facts (or why they failed) and where its mesh
    listener is."""
    try:
        facts = dict(ctx.facts.result(timeout=ctx.opts.stage_timeout))
    except Exception as exc:
        facts = {"error": f"facts failed: {exc}"}
    facts.setdefault("hostname", ctx.host)
    # here, on the main thread once torch is imported: importing torch in the facts thread
    # while the main thread imports it aborts the rank ("terminate called ... python_error")
    facts.update(gpu_facts(ctx.cfg.local_rank))
    facts["address"] = ctx.sel.address
    facts["interface"] = str(ctx.sel.interface)
    facts["mesh_port"] = ctx.listener.port
    facts["mtu_port"] = ctx.listener.echo.port
    facts["clock_offset_s"] = clock_offset
    facts["selection_problems"] = selection_problems(ctx.sel)
    facts["names"] = name_facts(ctx.cfg.master_addr, _host0(ctx), ctx.cfg.launcher)
    if ctx.to_rank0 is not None:
        facts["to_rank0"] = ctx.to_rank0
    if ctx.rank == 0:
        facts["own_addresses"] = own_addresses()
    return facts


def prefer_bindings(facts: list[Cause], bindings: list[Cause]) -> list[Cause]:
    """This check binds gloo where GLOO_SOCKET_IFNAME says, so a GLOO_SOCKET_IFNAME
    ``ifname-mismatch`` of ranks an ``interface-mismatch`` names is that same finding: keep
    the one the report always gave (pure)."""
    named = {r for c in facts if c.id == "interface-mismatch" for r in c.ranks}
    return facts + [c for c in bindings if not (
        c.data.get("var") == GLOO and not c.data.get("devices")
        and named and set(c.ranks) <= named)]


def _backend(requested: str) -> str | None:
    """The backend this check's process group will use (rank 0's view; None if unknown)."""
    from ddpnet.process_group import choose

    try:
        return choose(requested).backend
    except Exception:  # an impossible --backend is the process-group stage's to report
        return None


def publish(ctx: RankContext, clock_offset: float | None) -> None:
    """Ranks > 0."""
    ctx.store.publish("facts", ctx.rank, record(ctx, clock_offset))


def compare(ctx: RankContext, found: Findings) -> dict[int, dict[str, Any]]:
    """Rank 0: gather every rank's facts (bounded), compare them, fill the node table."""
    t = time.monotonic()
    ctx.progress("facts: collecting versions, interfaces, MTU, clocks")
    # rank 0's store looks up every rank that connects: time those lookups while gathering
    peers = in_thread(lambda: time_lookups(reverse=peer_addresses(
        [(r.rank, r.address) for r in found.roster])))
    own = record(ctx, clock_offset=0.0)
    ctx.store.publish("facts", 0, own)
    got: dict[int, dict[str, Any]] = ctx.store.gather("facts", found.ranks,
                                                      ctx.opts.stage_timeout)
    if isinstance(got.get(0, {}).get("resolver"), dict):
        got[0]["resolver"]["peer_lookups"] = [lk.to_dict() for lk in peers.result()]
    lost = [r for r in found.ranks if r not in got]
    if lost:
        found.causes.append(found.timeout_cause("facts", lost))
    found.causes.extend(master_paths(got, found))  # drops the ranks that stopped on it
    nodes = [NodeFacts(r, got[r]) for r in sorted(got)]
    found.causes.extend(prefer_bindings(compare_facts(nodes), compare_picks(nodes)))
    found.causes.extend(compare_nics(nodes))
    found.causes.extend(compare_addresses(nodes))
    found.causes.extend(compare_hostname_addresses(nodes))
    found.causes.extend(compare_resolvers(nodes))
    found.causes.extend(compare_gpus(nodes, _backend(ctx.opts.backend)))
    for node in found.nodes:
        f = got.get(int(str(node["rank"])), {})
        node.update({k: f.get(k) for k in NODE_KEYS})
        node["doctor"] = doctor_as_judged(f.get("doctor"), int(str(node["rank"])), found.causes)
        node["plain_job"] = plain_job(f)  # what a plain init_process_group would bind
        node["host"] = f.get("hostname", node["host"])
    found.stages["facts"] = "fail" if any(c.stage == "facts" and c.severity == "fail"
                                          for c in found.causes) else "pass"
    took = ctx.took("facts", t)
    ctx.progress(f"facts: compared {len(got)} ranks in {took:.1f} s")
    return got
