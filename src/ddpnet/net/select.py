"""Which interface gloo, NCCL and TensorPipe should use on this host, and why.

Rule (:func:`select`, what ``init()`` exports): the interface the kernel routes MASTER_ADDR
through (interface names may differ per host, so every host decides for itself); loopback only
when the whole job is on this host.
A user-set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME / TP_SOCKET_IFNAME wins but is checked:
it exists, is up, has an address of MASTER_ADDR's family, and speaks its library's syntax
(gloo and TensorPipe take plain names, gloo a comma list of them; NCCL its own syntax).

:func:`choose_interface` answers the wider question every command asks, "which interface
does this job use": an explicit flag (``--ifname``/``--iface``), then the user's exported
``*_SOCKET_IFNAME``, then the cluster subnet, then the route to MASTER_ADDR (:func:`select`),
then the default route, then the first usable interface.

:func:`select` and :func:`choose_interface` are pure; :func:`select_for_host` and
:func:`choose_for_host` read this host and call them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ddpnet.address import ip_in
from ddpnet.config import DistConfig
from ddpnet.errors import ConfigError, RendezvousError
from ddpnet.net.interfaces import Interface
from ddpnet.net.names import HostResolution, is_loopback
from ddpnet.net.nccl import IfnameSyntaxError, match, parse_nccl_ifname
from ddpnet.net.picks import nccl_pick
from ddpnet.net.routes import Route

GLOO = "GLOO_SOCKET_IFNAME"
NCCL = "NCCL_SOCKET_IFNAME"
TP = "TP_SOCKET_IFNAME"
VARIABLES = (GLOO, NCCL, TP)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


#: who set an interface variable in the user's place, ``GLOO_SOCKET_IFNAME=--local`` (comma
#: separated): ``--local`` pins its ranks to loopback, and their reports say so, not that the
#: user exported it
SET_BY = "DDPNET_SET_BY"


def set_by(environ: Mapping[str, str], var: str) -> str:
    """The source of ``var`` in ``environ``: who :data:`SET_BY` names, else ``var`` itself."""
    for item in environ.get(SET_BY, "").split(","):
        name, _, who = item.partition("=")
        if name.strip() == var and who.strip():
            return who.strip()
    return var


@dataclass(frozen=True)
class Choice:
    """One variable's value, where it came from (``auto``, the variable's name, who set it in
    its place per :data:`SET_BY` such as ``--local``, an argument, ``unset``) and why. A
    non-empty ``cause`` means the value cannot work (a :class:`RendezvousError` cause) and
    ``hint`` says how to fix it."""

    value: str | None
    source: str
    reason: str
    cause: str = ""
    hint: str = ""

    @property
    def ok(self) -> bool:
        return not self.cause

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "reason": self.reason,
                "cause": self.cause or None, "hint": self.hint or None}


@dataclass(frozen=True)
class Selection:
    """The interface toward MASTER_ADDR and the three variables derived from it."""

    interface: str | None
    address: str | None
    gloo: Choice
    nccl: Choice
    tp: Choice
    master: str = ""
    notes: tuple[str, ...] = field(default=())

    def choices(self) -> dict[str, Choice]:
        return {GLOO: self.gloo, NCCL: self.nccl, TP: self.tp}

    def env(self) -> dict[str, str]:
        """The variables ``init()`` sets: the automatic choices (user-set ones stay as they
        are and are not touched)."""
        return {var: c.value for var, c in self.choices().items()
                if c.source == "auto" and c.value is not None and c.ok}

    def problems(self) -> dict[str, Choice]:
        return {var: c for var, c in self.choices().items() if not c.ok}

    def error(self, *, host: str = "", rank: int | None = None,
              backend: str = "gloo") -> RendezvousError | None:
        """The first problem relevant to ``backend`` as an exception, or None."""
        relevant = (GLOO, NCCL) if backend == "nccl" else (GLOO,)
        for var in relevant:
            c = self.choices()[var]
            if not c.ok:
                where = f" on {host}" if host else ""
                where += f" (rank {rank})" if rank is not None else ""
                return RendezvousError(c.cause, f"{c.reason}{where}", c.hint, host=host,
                                       rank=rank, detail=f"{var}={c.value}")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"interface": self.interface, "address": self.address, "master": self.master,
                "variables": {var: c.to_dict() for var, c in self.choices().items()},
                "notes": list(self.notes)}


def _family(ip: str) -> int | None:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return None


@dataclass(frozen=True)
class _Auto:
    iface: Interface | None
    address: str | None
    reason: str
    cause: str = ""
    hint: str = ""


def _auto(cfg: DistConfig, by_name: Mapping[str, Interface], route: Route | None,
          single_host: bool) -> _Auto:
    master = cfg.master_addr
    if route is None:
        if cfg.sources.get("master_addr") == "default" and not single_host:
            return _first_usable(by_name, "MASTER_ADDR is not set")
        return _Auto(None, None, f"no route to MASTER_ADDR {master} on this host")
    dst = route.dst or master
    shown = dst if dst == master else f"{master} ({dst})"
    if is_loopback(dst) or _unspecified(dst):
        lo = next((i for i in by_name.values() if i.kind == "loopback"), None)
        if single_host:
            return _Auto(lo, dst, f"the whole job is on this host (MASTER_ADDR {shown} is "
                         f"loopback)")
        return _master_loopback(cfg, by_name, lo, dst, shown)
    if route.local or by_name.get(route.iface, _LO).kind == "loopback":
        owner = next((i for i in by_name.values() if i.owns(dst) and i.kind != "loopback"),
                     None)
        if owner is not None:
            return _Auto(owner, _carrier(owner, dst), f"MASTER_ADDR {shown} is this host's "
                         f"address on {owner.name}")
        return _Auto(None, dst, f"MASTER_ADDR {shown} is local but on no non-loopback "
                     f"interface")
    iface = by_name.get(route.iface)
    if iface is None:  # the table was read before the route: still trust the kernel
        iface = Interface(route.iface, True, (), 0, None, "virtual")
    via = f" via gateway {route.via}" if route.via else ""
    reason = f"routes to MASTER_ADDR {shown}{via} from src {route.src or '?'}"
    family = _family(dst)
    twins = [i.name for i in by_name.values() if i.name != iface.name and
             _same_subnet(i, route.src, family)]
    if twins:
        reason += f" (also on that subnet: {', '.join(twins)}; the kernel prefers {iface.name})"
    return _Auto(iface, _carrier(iface, route.src) or None, reason)


def _carrier(iface: Interface, address: str) -> str:
    """The address this rank's own traffic uses on ``iface``: ``address``, unless it is
    link-local (a MASTER_ADDR of ``fe80::...%eth0``): then the interface's first routable
    address, which peers dial without a zone of their own, else the zoned link-local one."""
    ip = address.partition("%")[0]
    try:
        link_local = ipaddress.ip_address(ip).is_link_local
    except ValueError:
        return address
    if not link_local:
        return address
    return _address(iface) or f"{ip}%{iface.name}"


_LO = Interface("lo", True, (), 0, None, "loopback")


def _unspecified(address: str) -> bool:
    """0.0.0.0 or ::, a bind address copied into MASTER_ADDR: a connect to it reaches this
    very host, so on a worker it is loopback in disguise."""
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_unspecified
    except ValueError:
        return False


def _loopback_name(name: str) -> bool:
    """localhost and its kin: loopback by design, not by a stale /etc/hosts line."""
    low = name.lower().rstrip(".")
    return low.split(".")[0] == "localhost" or low in ("ip6-localhost", "ip6-loopback")


def _master_loopback(cfg: DistConfig, by_name: Mapping[str, Interface], lo: Interface | None,
                     dst: str, shown: str) -> _Auto:
    """A single-node config copied to a cluster: MASTER_ADDR loopback while the job spans
    hosts; every node that has it names it before anything waits (pure)."""
    src = cfg.sources
    why = (f"WORLD_SIZE={cfg.world_size} with LOCAL_WORLD_SIZE={cfg.local_world_size} "
           f"({src.get('local_world_size', 'default')}) and {cfg.num_nodes} nodes "
           f"({src.get('num_nodes', 'default')})")
    if cfg.node_rank == 0:
        mine = _first_usable(by_name, "")
        target = mine.address or "<this host's cluster address>"
        where = f"this host (node 0) is rank 0's: `hostname -I` shows {target}" if \
            mine.address else "this host (node 0) is rank 0's: see `hostname -I`"
    else:
        target, where = "<rank-0 host's address>", "run `hostname -I` on rank 0's host"
    fix = f"export MASTER_ADDR={target} on every node (the same value; {where})"
    if _family(cfg.master_addr) is None and not _loopback_name(cfg.master_addr):
        # a host's name that this host's resolver maps to loopback (/etc/hosts)
        return _Auto(lo, dst, f"MASTER_ADDR {cfg.master_addr} resolves to loopback {dst} on "
                     f"this host, but the job spans {cfg.num_nodes} nodes ({why})",
                     "master-loopback",
                     f"make {cfg.master_addr} resolve to rank 0's cluster address here "
                     f"(`getent hosts {cfg.master_addr}`; fix or remove its 127.x line in "
                     f"/etc/hosts), or {fix}")
    what = "the unspecified address (it reaches this host)" if _unspecified(dst) else \
        "a loopback address"
    return _Auto(lo, dst, f"MASTER_ADDR {shown} is {what} but the job spans "
                 f"{cfg.num_nodes} nodes ({why}): the other nodes would connect to "
                 f"themselves", "master-loopback", fix)


def _same_subnet(iface: Interface, src: str, family: int | None) -> bool:
    if not src:
        return False
    try:
        ip = ipaddress.ip_address(src)
    except ValueError:
        return False
    return any(a.family == family and not a.is_link_local and ip in a.network()
               for a in iface.addresses)


def _first_usable(by_name: Mapping[str, Interface], why: str) -> _Auto:
    """No MASTER_ADDR to route to (file:// without it): the first up, addressed interface,
    preferring infiniband/physical over virtual and bridges, never loopback or docker."""
    order = {"infiniband": 0, "physical": 1, "virtual": 2, "bridge": 3}
    usable = [i for i in by_name.values()
              if i.up and i.kind in order and any(not a.is_link_local for a in i.addresses)]
    if not usable:
        return _Auto(None, None, f"{why} and no non-loopback interface is up")
    best = min(usable, key=lambda i: (order[i.kind], i.name))
    addr = next(a.ip for a in best.addresses if not a.is_link_local)
    return _Auto(best, addr, f"{why}: first up {best.kind} interface with an address")


def _suggest(auto: _Auto, by_name: Mapping[str, Interface], var: str, nccl: bool = False) -> str:
    if auto.iface is not None and not auto.cause:
        value = f"={auto.iface.name}" if nccl else auto.iface.name
        return f"unset {var} (ddpnet.init() picks {auto.iface.name}) or export {var}={value}"
    names = ", ".join(n for n, i in by_name.items() if i.up) or "none"
    return f"export {var}=<interface that reaches MASTER_ADDR> (up here: {names})"


def _plain_syntax(var: str, value: str, source: str, names: Sequence[str], lib: str,
                  by_name: Mapping[str, Interface], fix: str, many: bool) -> Choice | None:
    """A syntax problem of a gloo / TensorPipe value (NCCL syntax, an address, an empty
    entry, a list where one name is taken), or None."""
    if not many and "," in value:
        return Choice(value, source, f"{var}={value!r}: {lib} takes one interface name",
                      "ifname-syntax", fix)
    for name in names:
        if name[:1] in ("^", "="):
            return Choice(value, source, f"{var}={value!r} uses NCCL syntax ('^' / '='); "
                          f"{lib} takes plain interface names", "ifname-syntax",
                          f"{fix}; exclusions like ^lo belong in {NCCL} only")
        address = ip_in(name)
        if address is not None:
            owner = next((i.name for i in by_name.values() if i.owns(address.host)),
                         address.zone if address.zone in by_name else None)
            hint = f"export {var}={owner}" if owner else fix
            return Choice(value, source, f"{var}={value!r} is an IP address; {lib} takes an "
                          f"interface name", "ifname-syntax", hint)
        if not name:
            return Choice(value, source, f"{var}={value!r} has an empty entry",
                          "ifname-syntax", fix)
    return None


def _plain_usable(var: str, value: str, source: str, name: str,
                  by_name: Mapping[str, Interface], family: int | None, single_host: bool,
                  fix: str) -> Choice | None:
    """Why the interface ``name`` cannot carry the job (absent, down, no address of
    MASTER_ADDR's family, loopback in a multi-node job), or None."""
    iface = by_name.get(name)
    if iface is None:
        up = ", ".join(n for n, i in by_name.items() if i.up)
        return Choice(value, source, f"{var}={value!r}: no interface {name} on this host",
                      "ifname-missing", f"{fix} (up here: {up}; names differ per host, "
                      f"so leave it unset and let ddpnet.init() pick per host)")
    if not iface.up:
        return Choice(value, source, f"{var}={value!r}: interface {name} is down",
                      "ifname-down", f"ip link set {name} up, or {fix}")
    if family is not None and not iface.has_family(family):
        return Choice(value, source, f"{var}={value!r}: {name} has no IPv{family} address "
                      f"(MASTER_ADDR is IPv{family})", "ifname-no-address", fix)
    if iface.kind == "loopback" and not single_host:
        return Choice(value, source, f"{var}={value!r} binds loopback in a multi-node job: "
                      f"other nodes would be told to connect to 127.0.0.1",
                      "hostname-loopback", fix)
    return None


def _check_plain(var: str, value: str, source: str, by_name: Mapping[str, Interface],
                 family: int | None, single_host: bool, auto: _Auto,
                 many: bool) -> Choice:
    """gloo (comma list) / TensorPipe (one name): plain names, each present and usable."""
    lib = "gloo" if var == GLOO else "TensorPipe"
    names = [n.strip() for n in value.split(",")] if many else [value.strip()]
    fix = _suggest(auto, by_name, var)
    problem = _plain_syntax(var, value, source, names, lib, by_name, fix, many)
    for name in names:
        problem = problem or _plain_usable(var, value, source, name, by_name, family,
                                           single_host, fix)
    if problem is not None:
        return problem
    reason = f"set by {source}" if source != var else "set in the environment"
    if auto.iface is not None and not auto.cause and auto.iface.name not in names:
        reason += f" (note: MASTER_ADDR routes through {auto.iface.name})"
    return Choice(value, source, reason)


def _as_argument(choice: Choice, var: str, ifname: str,
                 by_name: Mapping[str, Interface]) -> Choice:
    """A problem with ``init(ifname=...)`` named as that argument: the user exported no
    ``*_SOCKET_IFNAME``, so "unset GLOO_SOCKET_IFNAME" would send them looking for one."""
    if choice.ok:
        return choice
    reason = choice.reason
    for prefix in (f"{var}={choice.value!r}", f"{var}:"):
        if reason.startswith(prefix):
            reason = f"ifname={ifname!r}" + reason[len(prefix):]
            break
    up = ", ".join(n for n, i in by_name.items() if i.up) or "none"
    hint = (f"pass ifname= an interface that is up here ({up}), or leave ifname out and let "
            "ddpnet.init() pick per host")
    return replace(choice, reason=reason, hint=hint)


def _check_nccl(value: str, source: str, by_name: Mapping[str, Interface],
                family: int | None, single_host: bool, auto: _Auto,
                order: Sequence[str] = ()) -> Choice:
    fix = _suggest(auto, by_name, NCCL, nccl=True)
    try:
        spec = parse_nccl_ifname(value)
    except IfnameSyntaxError as exc:
        return Choice(value, source, f"{NCCL}: {exc}", "ifname-syntax", fix)
    hits = [by_name[n] for n in match(spec, by_name)]
    usable = [i for i in hits if i.up and (family is None or i.has_family(family))]
    if not hits:
        return Choice(value, source, f"{NCCL}={value!r} matches no interface on this host",
                      "ifname-missing", fix)
    if not usable:
        names = ", ".join(i.name for i in hits)
        return Choice(value, source, f"{NCCL}={value!r} matches only {names}, none up with an "
                      f"IPv{family or 4} address", "ifname-no-address", fix)
    if not single_host and all(i.kind == "loopback" for i in usable):
        return Choice(value, source, f"{NCCL}={value!r} selects only loopback in a multi-node "
                      f"job", "hostname-loopback", fix)
    first = nccl_pick(value, tuple(by_name.values()), order)
    if not single_host and by_name.get(first.iface or "", _LO).kind == "loopback" and \
            first.iface is not None:
        also = f"; or exclude lo too: {NCCL}=^{','.join(spec.names)},lo" if spec.exclude else ""
        return Choice(value, source, f"{NCCL}={value!r}: NCCL binds the first match in the "
                      f"kernel's interface order, {first.iface} ({first.address}): loopback in "
                      f"a multi-node job", "hostname-loopback", fix + also)
    reason = (f"set by {source}" if source != NCCL else "set in the environment") + \
        f"; matches {', '.join(i.name for i in usable)}"
    if auto.iface is not None and not auto.cause and auto.iface not in usable:
        reason += f" (note: MASTER_ADDR routes through {auto.iface.name})"
    return Choice(value, source, reason)


_GUESSED = ("derived", "default", None)


def _single_host(cfg: DistConfig, route: Route | None) -> bool:
    """Whether the whole job runs on this host (pure). RANK/WORLD_SIZE alone only *derive*
    a node count, and then a loopback MASTER_ADDR says one host; but a node count or a
    LOCAL_WORLD_SIZE the launcher or user gave, smaller than WORLD_SIZE, says the job spans
    hosts: a loopback MASTER_ADDR is then a single-node config copied to a cluster."""
    if cfg.num_nodes <= 1 or cfg.world_size == cfg.local_world_size:
        return True
    if route is None or not is_loopback(route.dst):
        return False
    given_nodes = cfg.sources.get("num_nodes") not in _GUESSED
    given_local = cfg.sources.get("local_world_size") not in _GUESSED
    return not (given_nodes or given_local)


def select(cfg: DistConfig, interfaces: Sequence[Interface], route: Route | None,
           environ: Mapping[str, str], *, ifname: str | None = None,
           hostname: HostResolution | None = None, order: Sequence[str] = ()) -> Selection:
    """Choose the interface and the three variables for this host (pure).

    ``route`` is the kernel's route to MASTER_ADDR (already resolved to an address), or
    None. ``ifname`` (an ``init(ifname=...)`` argument) forces one interface for all three.
    ``hostname`` (this host's name resolved) only adds a note: the trap gloo falls into
    without GLOO_SOCKET_IFNAME. ``order`` is the kernel's interface order (NCCL binds the
    first match in it, :mod:`ddpnet.net.picks`; empty: by name).
    """
    by_name = {i.name: i for i in interfaces}
    single_host = _single_host(cfg, route)
    auto = _auto(cfg, by_name, route, single_host)
    family = _family(route.dst) if route is not None and route.dst else _family(
        cfg.master_addr)

    def pick(var: str) -> Choice:
        given, source = (ifname, "argument ifname") if ifname else (environ.get(var, ""),
                                                                      set_by(environ, var))
        if (var == GLOO and len(given.strip()) > 1) or (var != GLOO and given.strip()):
            # torch ignores GLOO_SOCKET_IFNAME of 0 or 1 characters
            if var == NCCL:
                choice = _check_nccl(f"={given}" if source == "argument ifname" else given,
                                     source, by_name, family, single_host, auto, order)
            else:
                choice = _check_plain(var, given, source, by_name, family, single_host, auto,
                                      many=var == GLOO)
            return _as_argument(choice, var, given, by_name) if ifname else choice
        if auto.iface is None:
            return Choice(None, "unset", auto.reason + "; the library picks on its own",
                          auto.cause, auto.hint)
        value = f"={auto.iface.name}" if var == NCCL else auto.iface.name
        return Choice(value, "auto", auto.reason, auto.cause, auto.hint)

    gloo, nccl, tp = pick(GLOO), pick(NCCL), pick(TP)
    chosen = gloo.value if gloo.source != "auto" and gloo.ok and gloo.value else None
    name = chosen.split(",")[0].strip() if chosen else (
        auto.iface.name if auto.iface else None)
    address = auto.address
    if chosen and name in by_name and (auto.iface is None or name != auto.iface.name):
        address = next((a.ip for a in by_name[name].addresses if a.family == family), None)
    notes = []
    if auto.iface is not None and auto.iface.kind == "docker":
        notes.append(f"MASTER_ADDR routes through docker interface {auto.iface.name}")
    if hostname is not None and hostname.addresses and is_loopback(hostname.addresses[0]) \
            and not single_host:
        # gloo binds the first address the hostname resolves to that it can bind
        fix = ("ddpnet.init() sets it" if gloo.source == "auto" and gloo.ok and gloo.value
               else "set GLOO_SOCKET_IFNAME")
        notes.append(f"hostname {hostname.name} resolves first to loopback "
                     f"({', '.join(hostname.addresses)}): without GLOO_SOCKET_IFNAME gloo "
                     f"binds {hostname.addresses[0]} and peers cannot connect; {fix}")
    return Selection(name, address, gloo, nccl, tp, master=cfg.master_addr,
                     notes=tuple(notes))


def select_for_host(cfg: DistConfig | None = None, environ: Mapping[str, str] | None = None,
                    *, ifname: str | None = None) -> Selection:
    """Read this host (interfaces, MASTER_ADDR resolution, the route to it) and select."""
    import os

    from ddpnet.env.resolve import resolve
    from ddpnet.net.interfaces import kernel_order, list_interfaces
    from ddpnet.net.names import resolve_host
    from ddpnet.net.routes import route_to

    env = os.environ if environ is None else environ
    if cfg is None:
        cfg = resolve(env)
    resolution = resolve_host(cfg.master_addr)
    route = None
    if resolution.ok:
        route = route_to(resolution.addresses[0])
    sel = select(cfg, list_interfaces(), route, env, ifname=ifname, hostname=resolve_host(),
                 order=kernel_order())
    if not resolution.ok:
        sel = Selection(sel.interface, sel.address, sel.gloo, sel.nccl, sel.tp, sel.master,
                        (*sel.notes, f"MASTER_ADDR {cfg.master_addr} does not resolve: "
                         f"{resolution.error}"))
    return sel


# --------------------------------------------------------------------------- the job's NIC

@dataclass(frozen=True)
class InterfaceChoice:
    """Which interface a job uses on this host (``name``, None when nothing was chosen), where
    the answer came from (``source``: ``flag``, ``environ``, ``subnet``, ``route``,
    ``default-route``, ``first-usable`` or ``none``) and why. ``env`` holds the
    ``*_SOCKET_IFNAME`` variables a launcher exports to its ranks for this choice."""

    name: str | None
    source: str
    reason: str
    address: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "reason": self.reason,
                "address": self.address, "env": dict(self.env)}


def user_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``*_SOCKET_IFNAME`` variables the user exported (non-empty), in our order."""
    return {v: environ[v] for v in VARIABLES if environ.get(v, "").strip()}


def _variables_for(name: str) -> dict[str, str]:
    """What ``init()`` would export for ``name`` (NCCL's exact-match syntax)."""
    return {GLOO: name, NCCL: f"={name}", TP: name}


def _address(iface: Interface | None, family: int | None = None) -> str | None:
    if iface is None:
        return None
    return next((a.ip for a in iface.addresses if not a.is_link_local and not a.is_loopback
                 and (family is None or a.family == family)), None)


def _from_flag(flag: str, flag_name: str, here: bool,
               by_name: Mapping[str, Interface]) -> InterfaceChoice:
    """An explicit flag wins; it must exist and be up here unless the ranks run elsewhere
    (a launcher's hosts, or SSH)."""
    if here and flag not in by_name:
        raise ConfigError(f"{flag_name} {flag}: no such interface on this host",
                          "choose one of: " + ", ".join(sorted(by_name)))
    if here and not by_name[flag].up:
        up = ", ".join(sorted(n for n, i in by_name.items() if i.up))
        raise ConfigError(f"{flag_name} {flag}: the interface is down on this host",
                          f"ip link set {flag} up, or choose one that is up: {up}")
    return InterfaceChoice(flag, "flag", flag_name,
                           _address(by_name.get(flag)) if here else None,
                           {v: flag for v in VARIABLES})


def _first_named(user: Mapping[str, str]) -> str | None:
    """The interface the user's variables name first: gloo's and TensorPipe's plain names
    before NCCL's (an exclusion like ``^lo`` names none, ``=eth0`` names eth0)."""
    for var in (GLOO, TP, NCCL):
        value = user.get(var, "").strip()
        if value and not value.startswith("^"):
            name = value.split(",")[0].strip().lstrip("=")
            if name:
                return name
    return None


def _from_environ(user: Mapping[str, str], here: bool, by_name: Mapping[str, Interface],
                  loopback_ok: bool) -> InterfaceChoice | None:
    """Variables the user exported win and are forwarded as they are. On this host
    (``here``) the interface they name must exist (and be a NIC unless ``loopback_ok``),
    else the next rule decides; for ranks elsewhere they are passed on unchecked."""
    if not user:
        return None
    name, reason = _first_named(user), f"{', '.join(user)} already set"
    if not here:
        return InterfaceChoice(name, "environ", reason, None, dict(user))
    iface = by_name.get(name or "")
    if iface is None or (not loopback_ok and iface.kind == "loopback"):
        return None
    return InterfaceChoice(iface.name, "environ", reason, _address(iface), dict(user))


def _from_subnet(subnet: IPNetwork, interfaces: Sequence[Interface]) -> InterfaceChoice | None:
    for i in interfaces:
        for a in i.addresses:
            if a.family == subnet.version and ipaddress.ip_address(a.ip) in subnet:
                return InterfaceChoice(i.name, "subnet",
                                       f"has {a.ip} in the cluster subnet {subnet}", a.ip,
                                       _variables_for(i.name))
    return None


def _from_selection(sel: Selection, by_name: Mapping[str, Interface],
                    loopback_ok: bool) -> InterfaceChoice | None:
    """The route to MASTER_ADDR, as ``init()`` selects it (its automatic variables only)."""
    if sel.interface is None:
        return None
    if not loopback_ok and by_name.get(sel.interface, _LO).kind == "loopback":
        return None
    env = sel.env()
    return InterfaceChoice(sel.interface, "route", sel.gloo.reason, sel.address, env)


def _fallback(default_route: str | None, by_name: Mapping[str, Interface],
              loopback_ok: bool, why: str) -> InterfaceChoice:
    """Nothing names an interface: the default route's, else the first usable one."""
    iface = by_name.get(default_route or "")
    if iface is not None and (loopback_ok or iface.kind != "loopback"):
        return InterfaceChoice(iface.name, "default-route", "carries the default route",
                               _address(iface), _variables_for(iface.name))
    first = _first_usable(by_name, why)
    if first.iface is None:
        return InterfaceChoice(None, "none", first.reason)
    return InterfaceChoice(first.iface.name, "first-usable", first.reason, first.address,
                           _variables_for(first.iface.name))


@dataclass(frozen=True)
class Ask:
    """What a command asks the selector: its flag (``flag_name`` in messages), its cluster
    subnet, and its policy. ``here`` is False where the ranks may run on other hosts (a
    launcher): names are then passed on unchecked. ``loopback_ok`` is False where a NIC is
    needed (tune). ``fallback``: past the route to MASTER_ADDR, take the default route's
    interface, then the first usable one (a launcher leaves the choice to torch instead)."""

    flag: str | None = None
    flag_name: str = "--iface"
    here: bool = True
    subnet: IPNetwork | None = None
    loopback_ok: bool = True
    fallback: bool = True


def choose_interface(
    interfaces: Sequence[Interface],
    ask: Ask = Ask(),
    *,
    environ: Mapping[str, str] | None = None,
    selection: Selection | None = None,
    no_selection: str = "no MASTER_ADDR to route to",
    default_route: str | None = None,
) -> InterfaceChoice:
    """Which interface the job uses here, first rule that answers (pure): ``ask.flag`` (a
    ConfigError when it is not on this host and ``ask.here``), the user's
    ``*_SOCKET_IFNAME`` in ``environ``, an interface with an address in ``ask.subnet``,
    ``selection`` (the route to MASTER_ADDR, :func:`select`; ``no_selection`` says why there
    is none), and with ``ask.fallback`` the ``default_route``'s interface, then the first
    usable one.
    """
    by_name = {i.name: i for i in interfaces}
    if ask.flag:
        return _from_flag(ask.flag, ask.flag_name, ask.here, by_name)
    picked = _from_environ(user_variables(environ or {}), ask.here, by_name, ask.loopback_ok)
    if picked is None and ask.subnet is not None:
        picked = _from_subnet(ask.subnet, interfaces)
    if picked is None and selection is not None:
        picked = _from_selection(selection, by_name, ask.loopback_ok)
    if picked is not None:
        return picked
    why = selection.gloo.reason if selection is not None else no_selection
    if not ask.fallback:
        return InterfaceChoice(None, "none", why)
    return _fallback(default_route, by_name, ask.loopback_ok, why)


def choose_for_host(
    ask: Ask = Ask(),
    *,
    environ: Mapping[str, str] | None = None,
    cfg: DistConfig | None = None,
    route_master: bool = True,
    proc: Path = Path("/proc"),
    interfaces: Sequence[Interface] | None = None,
) -> InterfaceChoice:
    """Read this host (interfaces, unless the caller already read them; the route to
    MASTER_ADDR only when no earlier rule answers and ``route_master``; the default route
    from ``proc``) and :func:`choose_interface`.

    A launcher configuration that cannot be resolved, or any failure reading the route, is
    no selection (its message becomes the reason): a dry run or a tune must not stop on it.
    """
    from ddpnet.net.interfaces import list_interfaces
    from ddpnet.net.routes import default_route_iface

    env = _environ(environ)
    table = list_interfaces() if interfaces is None else interfaces
    early = choose_interface(table, replace(ask, fallback=False), environ=env)
    if early.name is not None or early.source != "none":
        return early
    selection, why = None, "MASTER_ADDR is not set"
    if route_master:
        try:
            selection = select_for_host(cfg, env)
        except Exception as exc:  # a broken launcher environment is "no selection" here
            why = f"no interface selection ({exc})"
    return choose_interface(table, ask, environ=env, selection=selection, no_selection=why,
                            default_route=default_route_iface(proc) if ask.fallback else None)


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    import os

    return os.environ if environ is None else environ
