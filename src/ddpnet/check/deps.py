"""The pieces ``check`` borrows from other modules, injected so each stage can be tested
alone: interface selection and preflight (``ddpnet.net``), facts (``ddpnet.doctor.run``),
the collective bench (``ddpnet.bench``). ``default_deps()`` wires the real ones when they are
installed and this package's own minimal versions otherwise."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpnet.check.local import Selected, basic_facts, select_simple
from ddpnet.config import DistConfig
from ddpnet.errors import RendezvousError

SelectFn = Callable[[DistConfig, Mapping[str, str]], Selected]
PreflightFn = Callable[[DistConfig, Selected, float], None]
FactsFn = Callable[[DistConfig, Selected], dict[str, Any]]
BenchFn = Callable[[float], dict[str, Any]]


@dataclass(frozen=True)
class Deps:
    select: SelectFn
    preflight: PreflightFn
    facts: FactsFn
    bench: BenchFn | None


def simple_preflight(cfg: DistConfig, sel: Selected, connect_timeout: float) -> None:
    """Connect once to MASTER_ADDR:MASTER_PORT and name why it fails (a RendezvousError).
    Rank 0 hosts the port: its bind problems are named when it listens."""
    if cfg.rank == 0:
        return
    where = f"{cfg.master_addr}:{cfg.master_port}"
    try:
        infos = socket.getaddrinfo(cfg.master_addr, cfg.master_port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise RendezvousError(
            "master-unresolvable", f"MASTER_ADDR {cfg.master_addr} does not resolve ({exc})",
            "set MASTER_ADDR to rank 0's address or a name in /etc/hosts / DNS",
            host=socket.gethostname(), rank=cfg.rank) from None
    try:
        target = (str(infos[0][4][0]), int(infos[0][4][1]))
        with socket.create_connection(target, timeout=connect_timeout):
            return
    except TimeoutError:
        raise RendezvousError(
            "master-port-filtered",
            f"connecting to master {where} timed out after {connect_timeout:g} s: "
            "packets are dropped (a firewall on the master or in between)",
            f"on the master: open the port, e.g. firewall-cmd --add-port={cfg.master_port}/tcp"
            f" or nft insert rule inet filter input tcp dport {cfg.master_port} accept",
            host=socket.gethostname(), rank=cfg.rank) from None
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            raise RendezvousError(
                "master-port-refused",
                f"master {where} refused the connection: rank 0 is not listening there "
                "(not started yet, another MASTER_PORT, or a REJECT rule)",
                f"start rank 0 first and use the same MASTER_PORT={cfg.master_port} everywhere",
                host=socket.gethostname(), rank=cfg.rank) from None
        raise RendezvousError(
            "master-no-route", f"no route to master {where} ({exc.strerror})",
            "check `ip route get MASTER_ADDR` on this node and the cluster subnet",
            host=socket.gethostname(), rank=cfg.rank) from None


def _net_select() -> SelectFn | None:
    try:
        from ddpnet.net.select import select_for_host  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def select(cfg: DistConfig, environ: Mapping[str, str]) -> Selected:
        s = select_for_host(cfg, dict(environ))
        env = dict(s.env())
        pinned = s.gloo.source != "auto" and s.gloo.ok
        problems = tuple((c.cause, f"{var}={c.value}: {c.reason}", c.hint)
                         for var, c in s.problems().items() if var != "TP_SOCKET_IFNAME")
        if s.address is None:
            fallback = select_simple(cfg, environ)
            return Selected(fallback.interface, fallback.address, fallback.reason, pinned,
                            env, problems)
        return Selected(str(s.interface), str(s.address), s.gloo.reason, pinned, env,
                        problems)

    return select


def _net_preflight() -> PreflightFn | None:
    try:
        from ddpnet.net.probe import preflight  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def run(cfg: DistConfig, sel: Selected, connect_timeout: float) -> None:
        # interface problems are not fatal here: they travel in the facts, so rank 0
        # names them with the host instead of seeing a missing rank
        preflight(cfg, None, connect_timeout)

    return run


def _doctor_facts() -> FactsFn | None:
    try:
        from ddpnet.doctor.run import run_doctor  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def facts(cfg: DistConfig, sel: Selected) -> dict[str, Any]:
        base = basic_facts(sel)
        report = run_doctor(cfg=cfg, master_addr=cfg.master_addr, master_port=cfg.master_port)
        merged = {**base, **{k: v for k, v in dict(report.facts).items() if v is not None}}
        # the compared network facts are the ones this check selected and uses
        for key in ("interface", "address", "interface_pinned"):
            merged[key] = base[key]
        merged["doctor"] = {
            "verdict": report.verdict,
            # rendezvous.* raced with this very rendezvous; check's own stage supersedes them
            "failed": [c.id for c in report.checks
                       if c.status == "fail" and not c.id.startswith("rendezvous.")],
        }
        return merged

    return facts


def _bench() -> BenchFn | None:
    try:
        from ddpnet.bench import BenchConfig, run  # type: ignore[import-not-found,attr-defined,unused-ignore]
    except ImportError:
        return None

    def bench(link_gbps: float) -> dict[str, Any]:
        """A short all_reduce sweep (1-64 MiB) against the slowest link the tournament
        measured; without a matrix, no baseline (the full one is `ddpnet bench`)."""
        link = None
        if link_gbps > 0:
            try:
                from ddpnet.bench.result import LinkRate  # type: ignore[import-not-found,unused-ignore]

                link = LinkRate(gbps=link_gbps, method="ddpnet check tournament (slowest link)")
            except ImportError:
                link = None
        config = BenchConfig(collectives=("all_reduce",), min_bytes=1 << 20,
                             max_bytes=64 << 20, iters=5,
                             baseline="auto" if link is not None else "none")
        result = run(config, link=link) if link is not None else run(config)
        out: dict[str, Any] = dict(result.to_dict())
        out["measured_link_gbps"] = link_gbps
        return out

    return bench


def default_deps() -> Deps:
    return Deps(
        select=_net_select() or select_simple,
        preflight=_net_preflight() or simple_preflight,
        facts=_doctor_facts() or (lambda cfg, sel: basic_facts(sel)),
        bench=_bench(),
    )
