"""``ddpnet doctor``: every family's checks on this node, run concurrently, as one report.

:func:`run_checks` is the engine (any :class:`Host` and :class:`Inputs`, so fixture trees test
it); :func:`run_doctor` is the edge that reads this host: resolves the config, lists
interfaces, asks ``ddpnet.net.select`` for the training interface, then runs the registry.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ddpnet.config import DistConfig
from ddpnet.doctor import (
    environment,
    firewall,
    interfaces,
    names,
    rdma,
    rendezvous,
    selinux,
    software,
    sysctl,
)
from ddpnet.doctor.base import (
    FAMILIES,
    Check,
    CheckResult,
    Host,
    Inputs,
    InterfaceLike,
    SelectedInterface,
    worst,
)
from ddpnet.errors import ConfigError, DdpnetError
from ddpnet.exitcodes import ExitCode

#: the registry, in display order (one module per family)
REGISTRY: Mapping[str, tuple[Check, ...]] = {
    "rendezvous": rendezvous.CHECKS,
    "names": names.CHECKS,
    "interfaces": interfaces.CHECKS,
    "firewall": firewall.CHECKS,
    "selinux": selinux.CHECKS,
    "sysctl": sysctl.CHECKS,
    "software": software.CHECKS,
    "rdma": rdma.CHECKS,
    "environment": environment.CHECKS,
}
assert tuple(REGISTRY) == FAMILIES

#: no single name lookup may hold the doctor longer than this (issue: no wait over 1 s)
RESOLVE_TIMEOUT = 1.0


def all_checks() -> tuple[Check, ...]:
    return tuple(c for family in REGISTRY.values() for c in family)


@dataclass(frozen=True)
class DoctorReport:
    verdict: str
    checks: tuple[CheckResult, ...]
    facts: Mapping[str, Any]
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The ``ddpnet doctor --json`` object."""
        return {
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "facts": dict(self.facts),
            "elapsed_s": round(self.elapsed_s, 3),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DoctorReport:
        """A report back from ``ddpnet doctor --json`` output (what ``ddpnet check`` collects
        from other nodes); per-check facts are not in the JSON, ``facts`` holds them all."""
        checks = tuple(
            CheckResult(c["id"], c["family"], c["status"], c["summary"], c.get("detail", ""),
                        c.get("fix", ""))
            for c in data["checks"]
        )
        return cls(data["verdict"], checks, dict(data["facts"]),
                   float(data.get("elapsed_s", 0.0)))

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def exit_code(self) -> int:
        """1 when any check failed (the ``ddpnet doctor`` exit status), else 0."""
        return int(ExitCode.CHECK_FAILED if self.verdict == "fail" else ExitCode.OK)


def _guarded(check: Check, host: Host, inputs: Inputs) -> CheckResult:
    """A check that raises is reported as failed with the error, never swallowed."""
    try:
        return check.run(host, inputs)
    except Exception as exc:  # a bug in a check must not hide the other checks
        return check.result("fail", f"check {check.id} crashed: {type(exc).__name__}: {exc}",
                            fix="report this as a ddpnet bug (run with DDPNET_DEBUG=1)")


def merge_facts(results: Sequence[CheckResult], base: Mapping[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = dict(base)
    for result in results:
        for key, value in result.facts.items():
            if isinstance(value, Mapping) and isinstance(facts.get(key), dict):
                facts[key].update(value)
            else:
                facts[key] = dict(value) if isinstance(value, Mapping) else value
    return facts


def run_checks(host: Host, inputs: Inputs, checks: Sequence[Check] | None = None,
               *, workers: int = 16, prefetch: bool = True) -> DoctorReport:
    """Run ``checks`` (default: all) concurrently; results keep registry order."""
    started = time.monotonic()
    chosen = tuple(checks if checks is not None else all_checks())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool:
        if prefetch:  # slowest first: the torch probe and the firewall dumps
            pool.submit(software.probe, host)
            pool.submit(firewall.state_of, host)
        futures = [pool.submit(_guarded, c, host, inputs) for c in chosen]
        results = tuple(f.result() for f in futures)
    order = {family: i for i, family in enumerate(FAMILIES)}
    results = tuple(sorted(results, key=lambda r: order.get(r.family, len(order))))
    facts = merge_facts(results, {"hostname": host.hostname, "time": time.time()})
    for key in ("python", "torch", "cuda", "nccl", "hostname_loopback", "interface",
                "address", "mtu", "subnet"):
        facts.setdefault(key, None)
    return DoctorReport(worst([r.status for r in results]), results, facts,
                        time.monotonic() - started)


# --------------------------------------------------------------------------- the edge

def resolve_name(name: str, timeout: float = RESOLVE_TIMEOUT) -> list[str]:
    """getaddrinfo bounded by ``timeout`` (a daemon thread: a hung resolver cannot block exit)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
            box["addrs"] = [str(i[4][0]) for i in infos]
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True, name=f"resolve-{name}")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise OSError(f"lookup of {name} did not answer within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return list(dict.fromkeys(box["addrs"]))


def cache_dir(environ: Mapping[str, str], account_home: str | None = None) -> Path | None:
    """Where per-install facts are cached: ``$XDG_CACHE_HOME``, ``$HOME/.cache``, else the
    account's own home (``account_home``, from the password database): slurmd runs
    HealthCheckProgram with an empty environment, and without a cache every health check
    imported torch in a child again (1-4 s of CPU per node per interval)."""
    home = environ.get("HOME") or account_home
    base = environ.get("XDG_CACHE_HOME") or (str(Path(home) / ".cache") if home else "")
    return Path(base) / "ddpnet" if base else None


def account_home() -> str | None:
    """This user's home directory from the password database (edge), or None where it has
    none that exists (``nobody``'s ``/nonexistent``)."""
    import pwd

    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
    return home if home not in ("", "/") and Path(home).is_dir() else None


def real_host(environ: Mapping[str, str] | None = None) -> Host:
    env = dict(os.environ if environ is None else environ)
    from ddpnet.net.resolver import time_lookups

    return Host(environ=env, hostname=socket.gethostname(), resolve=resolve_name,
                lookups=time_lookups,
                which=shutil.which, cache=cache_dir(env, account_home()),
                native=software.native_facts)


def _interfaces() -> tuple[InterfaceLike, ...]:
    from ddpnet.net.interfaces import list_interfaces

    return tuple(list_interfaces())


def _selection(cfg: DistConfig | None, host: Host,
               ifaces: Sequence[InterfaceLike]) -> SelectedInterface:
    """``ddpnet.net.select.select`` fed with this host's interfaces, MASTER_ADDR resolved with
    the doctor's 1 s bound, and the kernel's route to it."""
    if cfg is None:
        return SelectedInterface(None, None, "configuration invalid: no selection")
    from ddpnet.net.routes import route_to
    from ddpnet.net.select import select

    route = None
    try:
        addrs = names.resolve(host, cfg.master_addr)[0]
        if addrs:
            route = route_to(addrs[0], timeout=RESOLVE_TIMEOUT)
    except (OSError, ValueError):
        route = None
    try:
        sel = select(cfg, ifaces, route, host.environ)  # type: ignore[arg-type]
    except DdpnetError as exc:
        return SelectedInterface(None, None, f"{exc.message} (hint: {exc.hint})")
    return SelectedInterface(sel.interface, sel.address, sel.gloo.reason)


def _cluster_nic(host: Host, ifaces: Sequence[InterfaceLike],
                 cluster_subnet: str | None) -> SelectedInterface:
    """The node's cluster NIC by the one selector, loopback refused, no route to MASTER_ADDR
    (``_selection`` has that one): what a firewall fix must admit peers on."""
    from ddpnet.net.select import Ask, choose_for_host

    subnet = ipaddress.ip_network(cluster_subnet, strict=False) if cluster_subnet else None
    try:
        choice = choose_for_host(Ask(subnet=subnet, loopback_ok=False), environ=host.environ,
                                 route_master=False, proc=host.proc,
                                 interfaces=ifaces)  # type: ignore[arg-type]
    except DdpnetError as exc:
        return SelectedInterface(None, None, exc.message)
    return SelectedInterface(choice.name, choice.address, choice.reason)


def _c10d(environ: Mapping[str, str]) -> bool:
    backend = environ.get("PET_RDZV_BACKEND") or environ.get("TORCHELASTIC_RDZV_BACKEND") or ""
    return backend.strip() == "c10d"


def build_inputs(host: Host, master_addr: str | None, master_port: int | None,
                 cluster_subnet: str | None, cfg: DistConfig | None = None
                 ) -> tuple[Inputs, DistConfig | None]:
    """Resolve the config (an invalid one is a failed check, not an error), then the
    interfaces and the selection (edge)."""
    from ddpnet.env.resolve import resolve

    environ = host.environ
    error: tuple[str, str] | None = None
    if cfg is None:
        try:
            cfg = resolve(environ, master_addr=master_addr, master_port=master_port)
        except ConfigError as exc:
            error = (exc.message, exc.hint)
    if cluster_subnet is not None:
        try:
            ipaddress.ip_network(cluster_subnet, strict=False)
        except ValueError:
            raise ConfigError(f"--cluster-subnet {cluster_subnet!r} is not a CIDR subnet",
                              "give it as address/prefix, e.g. 10.0.0.0/24") from None
    ifaces = _interfaces()
    selected = _selection(cfg, host, ifaces)
    summary = ""
    if cfg is not None:
        summary = (f"{cfg.launcher}: master {cfg.master_addr}:{cfg.master_port}, "
                   f"world size {cfg.world_size}, {cfg.num_nodes} node(s), node rank "
                   f"{cfg.node_rank}")
    inputs = Inputs(
        master_addr=cfg.master_addr if cfg else (master_addr or "127.0.0.1"),
        master_port=cfg.master_port if cfg else (master_port or 29500),
        world_size=cfg.world_size if cfg else 1,
        num_nodes=cfg.num_nodes if cfg else 1,
        node_rank=cfg.node_rank if cfg else 0,
        launcher=cfg.launcher if cfg else "unknown",
        config_error=error,
        config_summary=summary,
        cluster_subnet=cluster_subnet,
        interfaces=ifaces,
        selected=selected,
        c10d=_c10d(environ),
        cluster=_cluster_nic(host, ifaces, cluster_subnet),
    )
    return inputs, cfg


def run_doctor(cfg: DistConfig | None = None, master_addr: str | None = None,
               master_port: int | None = None, cluster_subnet: str | None = None,
               *, environ: Mapping[str, str] | None = None,
               torch_probe: Callable[[], Mapping[str, Any]] | None = None) -> DoctorReport:
    """Check this node (edge). ``cfg`` is an already resolved config (then ``master_addr`` and
    ``master_port`` are not used); without it they override ``ddpnet.resolve()``. A config
    that does not resolve is the failed ``rendezvous.config`` check, not an exception; a bad
    ``cluster_subnet`` raises ConfigError. ``torch_probe``: see ``Host.torch_probe``."""
    started = time.monotonic()
    host = replace(real_host(environ), torch_probe=torch_probe)
    with ThreadPoolExecutor(max_workers=2) as early:
        # the torch probe takes longest: start it while interfaces and routes are read
        early.submit(software.probe, host)
        early.submit(firewall.state_of, host)
        inputs, _ = build_inputs(host, master_addr, master_port, cluster_subnet, cfg)
        report = run_checks(host, inputs, prefetch=False)
    return DoctorReport(report.verdict, report.checks, report.facts,
                        time.monotonic() - started)


@dataclass(frozen=True)
class DoctorOptions:
    """What ``ddpnet doctor`` was asked; ``None`` means ``ddpnet env``'s value."""

    master_addr: str | None = None
    master_port: int | None = None
    cluster_subnet: str | None = None

    def __post_init__(self) -> None:
        # a bad flag is the user's typing (exit 2); a bad launcher variable is a finding (a
        # failed row, exit 1), because the environment is what doctor examines
        if self.master_addr is not None:
            from ddpnet.address import parse_address

            parse_address(self.master_addr, "--master-addr")  # every form, the one parser


def run(options: DoctorOptions, environ: Mapping[str, str] | None = None) -> DoctorReport:
    """``ddpnet doctor``: check this node with the process's environment (edge)."""
    return run_doctor(master_addr=options.master_addr, master_port=options.master_port,
                      cluster_subnet=options.cluster_subnet,
                      environ=os.environ if environ is None else environ)
