"""The rendezvous preflight: prove MASTER_ADDR:MASTER_PORT is reachable (or free, on rank 0)
in ``connect_timeout`` seconds, and name the cause when it is not, instead of letting
``init_process_group`` wait for torch's 30-minute default.

Why a separate probe: torch's TCPStore client retries every failure (refused, reset, timed
out) with backoff until the process-group timeout and then reports only "timed out", which
hides the difference between "rank 0 not up yet", "nothing listens" and "a firewall drops
SYNs". A plain TCP connect sees that difference, so ranks > 0 connect, retrying "refused"
(rank 0 may start later) until the deadline, and classify the last outcome.

:func:`classify_connect` and :func:`classify_bind` are pure; :func:`preflight` is the edge.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddpnet.config import DistConfig
from ddpnet.env.jobport import DEFAULT_EPHEMERAL, TORCH_DEFAULT_PORT
from ddpnet.errors import RendezvousError
from ddpnet.net.names import hosts_lines, hosts_names, read_hosts
from ddpnet.net.ports import Holder, sockaddr
from ddpnet.net.routes import NEIGH_DEAD, Route
from ddpnet.net.select import Selection

#: outcomes of one connect attempt
CONNECTED, REFUSED, TIMEOUT, UNREACHABLE, RESET, OTHER = (
    "connected", "refused", "timeout", "unreachable", "reset", "other")

#: the longest single attempt: long enough for SYN retransmits, short enough to retry
ATTEMPT_TIMEOUT = 3.0
#: retry pause after a fast failure: 0.1 s doubling to 1 s, with +-50 % jitter: 1000 ranks
#: waiting for rank 0 send ~1000 SYNs/s (each answered by one RST), not a synchronized storm,
#: and a rank notices rank 0 at most ~1.5 s after it listens
RETRY_FIRST, RETRY_MAX = 0.1, 1.0


def retry_delay(attempt: int, jitter: float) -> float:
    """Pause before retry number ``attempt`` (0-based); ``jitter`` in [0, 1) (pure)."""
    return float(min(RETRY_MAX, RETRY_FIRST * 2.0 ** min(attempt, 16)) * (0.5 + jitter))


@dataclass(frozen=True)
class Attempt:
    outcome: str
    error: str = ""


def outcome_of(exc: BaseException | None) -> Attempt:
    """Map a connect() exception to an outcome (pure)."""
    if exc is None:
        return Attempt(CONNECTED)
    if isinstance(exc, TimeoutError):  # socket.timeout is an alias
        return Attempt(TIMEOUT, "timed out")
    code = getattr(exc, "errno", None)
    text = os.strerror(code) if isinstance(code, int) else str(exc)
    if code == errno.ECONNREFUSED:
        return Attempt(REFUSED, text)
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
        return Attempt(UNREACHABLE, text)
    if code in (errno.ECONNRESET, errno.ECONNABORTED):
        return Attempt(RESET, text)
    if code == errno.ETIMEDOUT:
        return Attempt(TIMEOUT, text)
    return Attempt(OTHER, text)


def _endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _where(host: str, rank: int | None) -> str:
    parts = [p for p in (f"on {host}" if host else "",
                         f"rank {rank}" if rank is not None else "") if p]
    return f" ({', '.join(parts)})" if parts else ""


def _open_port_hint(addr: str, port: int) -> str:
    return (f"open TCP {port} on the master {addr}: `firewall-cmd --add-port={port}/tcp` "
            f"(firewalld), `nft insert rule inet filter input tcp dport {port} accept` or "
            f"`iptables -I INPUT -p tcp --dport {port} -j ACCEPT` (gloo/NCCL also need the "
            f"nodes' ephemeral ports; `ddpnet tune` does both)")


def classify_connect(attempts: list[Attempt], addr: str, port: int, elapsed: float, *,
                     master: str = "", host: str = "", rank: int | None = None,
                     neighbor: str | None = None,
                     duplicate: tuple[str, str, tuple[str, ...]] | None = None,
                     path: tuple[str, str, str] | None = None) -> RendezvousError | None:
    """The error for a connect loop that ended with ``attempts`` (pure); None if it got in.

    ``neighbor`` is the kernel's neighbour state of an on-link master after the loop:
    FAILED / INCOMPLETE turns "timed out" into "no host has this address". ``duplicate``
    (this node's address, its interface, the MACs of other hosts answering ARP for it)
    turns it into ``duplicate-address``: the master's replies go to the other host.
    ``path`` (cause, what the kernel said, the fix) is this node's own kernel explaining
    the timeout (:func:`path_problem`): ``asymmetric-route`` or ``reverse-path-drop``."""
    if not attempts or attempts[-1].outcome in (CONNECTED, RESET):
        # reset: something accepted then dropped us (a busy TCPStore backlog): reachable
        return None
    last = attempts[-1]
    counts = Counter(a.outcome for a in attempts)
    detail = (f"{len(attempts)} attempt(s) in {elapsed:.1f} s: "
              + ", ".join(f"{n} {o}" for o, n in counts.most_common()) + f"; last: {last.error}")
    ep = _endpoint(addr, port)
    named = f"MASTER_ADDR {master} ({addr})" if master and master != addr else addr
    where = _where(host, rank)
    if last.outcome == TIMEOUT and neighbor in NEIGH_DEAD:
        return RendezvousError(
            "master-no-route",
            f"no host answers at {named}: ARP / neighbour discovery for it fails "
            f"({neighbor}) after {elapsed:.1f} s{where}",
            f"set MASTER_ADDR to the rank-0 node's address (check `ip -br addr` there), then "
            f"`ip neigh show {addr}` and `ping -c1 {addr}` from this node",
            host=host, rank=rank, detail=detail + f"; neighbour state {neighbor}")
    if last.outcome in (TIMEOUT, REFUSED) and duplicate is not None and duplicate[2]:
        how = "time out" if last.outcome == TIMEOUT else "are refused"
        return duplicate_error(f"connections to {ep} {how} after {elapsed:.1f} s", named,
                               duplicate, host=host, rank=rank, where=where, detail=detail)
    if last.outcome == TIMEOUT and path is not None:
        return RendezvousError(
            path[0], f"connections to {ep} time out after {elapsed:.1f} s: {path[1]}{where}",
            path[2] + "; no firewall needs opening", host=host, rank=rank, detail=detail)
    if last.outcome == TIMEOUT:
        return RendezvousError(
            "master-port-filtered",
            f"connections to {ep} time out after {elapsed:.1f} s: SYNs to {named} port {port} "
            f"are dropped, a firewall is in the way{where}",
            _open_port_hint(addr, port), host=host, rank=rank, detail=detail)
    if last.outcome == REFUSED:
        return RendezvousError(
            "master-port-refused",
            f"{ep} refuses connections: the host {named} is up but nothing listened on port "
            f"{port} within {elapsed:.1f} s{where}",
            f"start rank 0 on {addr} (it must run ddpnet.init() with MASTER_PORT={port}); use "
            f"the same MASTER_PORT on every node; if rank 0 crashed, read its log",
            host=host, rank=rank, detail=detail)
    if last.outcome == UNREACHABLE:
        return RendezvousError(
            "master-no-route",
            f"no host answers at {named}: {last.error.lower()}{where}",
            f"set MASTER_ADDR to the rank-0 node's address (check `ip -br addr` there), then "
            f"`ip route get {addr}` and `ping -c1 {addr}` from this node",
            host=host, rank=rank, detail=detail)
    return RendezvousError(
        "master-no-route", f"cannot connect to {ep}: {last.error}{where}",
        f"check MASTER_ADDR={master or addr} and MASTER_PORT={port}: `ip route get {addr}`",
        host=host, rank=rank, detail=detail)


def name_source(error: RendezvousError, master: str, addr: str, hosts: str,
                host: str = "") -> RendezvousError:
    """A failed connect to MASTER_ADDR given as a name that this node's hosts file maps:
    the line it followed, and the other names that file gives the address (another node's,
    when the line is stale), with a fix for the line instead of "start rank 0 there" (pure).
    The name resolves per node: a stale line on one worker sends it to another machine."""
    lines = [ln for ln in hosts_lines(hosts, master) if ln.split()[0] == addr]
    if not lines or master == addr:
        return error
    others = [n for n in hosts_names(hosts, addr)
              if n not in (master, master.split(".")[0])]
    line = lines[0]
    seen = (f"; MASTER_ADDR {master} resolves here through the /etc/hosts line '{line}'"
            + (f" to {addr}, which that file also names {', '.join(others)}: another node, "
               "so the line is likely stale" if others else f" to {addr}"))
    on = f"on {host}: " if host else ""
    hint = (f"{on}fix or remove the line '{line}' in /etc/hosts so {master} resolves to rank "
            f"0's address (`getent hosts {master}` here and on rank 0's host must agree), or "
            f"export MASTER_ADDR=<rank 0's IP> on every node; if rank 0 does run on {addr}, "
            f"then: {error.hint}")
    return RendezvousError(error.cause, error.message + seen, hint, host=error.host,
                           rank=error.rank, detail=f"{error.detail}; /etc/hosts: {line}")


def duplicate_error(seen: str, named: str, duplicate: tuple[str, str, tuple[str, ...]], *,
                    host: str = "", rank: int | None = None, where: str = "",
                    detail: str = "") -> RendezvousError:
    """``duplicate-address``: what was seen, and the other host answering ARP for this
    node's own address (pure)."""
    own, iface, macs = duplicate
    return RendezvousError(
        "duplicate-address",
        f"{seen}, and another host (MAC {', '.join(macs)}) answers ARP for this node's own "
        f"address {own} on {iface}: two hosts share it, so {named}'s replies go to the other "
        f"one{where}",
        f"give one of the two hosts another address (static configuration or DHCP "
        f"reservation; a cloned VM image keeps its address); `ip neigh show {own}` on "
        f"the master shows which MAC it reaches; no firewall needs opening",
        host=host, rank=rank, detail=(detail + "; " if detail else "")
        + f"ARP for {own} answered by {', '.join(macs)}")


def classify_bind(exc: OSError, port: int, *, host: str = "", rank: int | None = None
                  ) -> RendezvousError:
    """The error for rank 0 failing to bind MASTER_PORT (pure)."""
    where = _where(host, rank)
    if exc.errno == errno.EACCES:
        return RendezvousError(
            "port-in-use", f"MASTER_PORT {port} needs root to bind{where}",
            "use a port above 1024 on every node, e.g. MASTER_PORT=29500",
            host=host, rank=rank, detail=str(exc))
    return RendezvousError(
        "port-in-use",
        f"MASTER_PORT {port} is already in use on the rank-0 host{where}",
        f"see who holds it: `ss -ltnp 'sport = :{port}'`; stop that process (an earlier run?) "
        f"or export MASTER_PORT=<free port> on every node",
        host=host, rank=rank, detail=str(exc))


# ---- edge ---------------------------------------------------------------------------------

Connector = Callable[[str, int, float], None]


def _tcp_connect(addr: str, port: int, timeout: float) -> None:
    family, where = sockaddr(addr, port)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(where)


def connect_loop(addr: str, port: int, connect_timeout: float, *,
                 connect: Connector = _tcp_connect,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[list[Attempt], float]:
    """Connect until it works or the deadline passes; retries every failure (rank 0 may come
    up late, ARP may need a second try) and returns the attempts and the time spent."""
    start = clock()
    deadline = start + connect_timeout
    attempts: list[Attempt] = []
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            break
        try:
            connect(addr, port, min(ATTEMPT_TIMEOUT, remaining))
        except OSError as exc:
            attempts.append(outcome_of(exc))
        else:
            attempts.append(Attempt(CONNECTED))
            break
        if attempts[-1].outcome != TIMEOUT:
            pause = retry_delay(len(attempts) - 1, random.random())
            sleep(min(pause, max(0.0, deadline - clock())))
    return attempts, clock() - start


def check_bind(addr: str, port: int) -> None:
    """Bind and listen where TCPStore will (the wildcard address, SO_REUSEADDR like it)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        s.listen(1)


def _agent_store(environ: Mapping[str, str]) -> bool:
    """torchrun's agent already hosts the store on MASTER_PORT; rank 0 does not bind it."""
    return environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"


def preflight(cfg: DistConfig, selection: Selection | None, connect_timeout: float, *,
              backend: str = "gloo", environ: Mapping[str, str] | None = None,
              host: str | None = None, connect: Connector = _tcp_connect) -> None:
    """Raise RendezvousError with a cause when the rendezvous cannot work (edge).

    Bounded by ``connect_timeout`` seconds (name resolution included). ``file://`` needs
    no port; rank 0 (the TCPStore host, unless torchrun's agent is) checks MASTER_PORT is
    free and that MASTER_ADDR is its own; every other rank connects to it.
    """
    env = os.environ if environ is None else environ
    me = socket.gethostname() if host is None else host
    _refuse_interface(cfg, selection, me, backend)
    if cfg.init_method.startswith("file://"):
        return  # the file is the rendezvous; interface problems were checked above
    started = time.monotonic()
    hosts_store = cfg.rank == 0 and not _agent_store(env)
    if hosts_store and cfg.world_size == 1:
        _bind_or_raise(cfg, me)  # torch still hosts a TCPStore for a group of one
        return
    addr, route = _master_route(cfg, me, connect_timeout)
    if hosts_store:
        _require_local_master(cfg, addr, route, me)
        _bind_or_raise(cfg, me)
        return
    left = connect_timeout - (time.monotonic() - started)
    _connect_or_raise(cfg, addr, route, me, max(left, 0.1), connect)


def _refuse_interface(cfg: DistConfig, selection: Selection | None, me: str,
                      backend: str) -> None:
    from ddpnet.net.zones import refuse_unusable_zone

    refuse_unusable_zone(cfg, me)  # before anything binds or dials a zone-less fe80::
    if selection is not None:
        problem = selection.error(host=me, rank=cfg.rank, backend=backend)
        if problem is not None:
            raise problem
        refuse_master_on_bridge(cfg, selection, me)


def launch_preflight(cfg: DistConfig, selection: Selection | None, *,
                     hosts_store: bool | None, host: str | None = None,
                     timeout: float = 5.0) -> None:
    """A launcher's preflight, before any of this node's ranks starts (edge): the interface
    problems :func:`preflight` names, MASTER_ADDR resolvable and routed, and on the node
    that hosts the store (``hosts_store``; None: the node MASTER_ADDR is local to, as
    torchrun's c10d rendezvous decides) MASTER_PORT free. No connect: rank 0's node may
    start later. ``cfg`` is the node's view: its first rank, the job's world size."""
    me = socket.gethostname() if host is None else host
    _refuse_interface(cfg, selection, me, "gloo")
    if cfg.init_method.startswith("file://"):
        return
    if hosts_store and cfg.world_size == 1:
        _bind_or_raise(cfg, me)
        return
    addr, route = _master_route(cfg, me, timeout)
    local = route.local or ipaddress.ip_address(addr.partition("%")[0]).is_loopback
    if hosts_store:
        _require_local_master(cfg, addr, route, me)
    if hosts_store or (hosts_store is None and local):
        _bind_or_raise(cfg, me)


def refuse_master_on_bridge(cfg: DistConfig, sel: Selection, host: str) -> None:
    """A rank on another node than rank 0's (NODE_RANK/GROUP_RANK/SLURM_NODEID > 0) whose
    MASTER_ADDR is its own address on a container bridge (docker0's 172.17.0.1 is on every
    Docker host): it would connect to itself and wait out the join timeout. Named at once,
    by init()'s preflight and by check's."""
    from ddpnet.net.interfaces import list_interfaces

    if cfg.node_rank < 1 or not _node_rank_known(cfg):
        return
    if sel.address is None or sel.address != cfg.master_addr:
        return
    iface = next((i for i in list_interfaces() if i.owns(sel.address)), None)
    if iface is None or iface.kind not in ("docker", "bridge"):
        return
    raise RendezvousError(
        "master-address-local",
        f"MASTER_ADDR {cfg.master_addr} is this node's own address on {iface.kind} interface "
        f"{iface.name} (node {cfg.node_rank}, not rank 0's): a container bridge address "
        f"every node has, so this rank would connect to itself",
        "export MASTER_ADDR=<rank 0's address on the cluster network> on every node (on rank "
        "0's host: `ip -br addr`, not the docker0/bridge address)",
        host=host, rank=cfg.rank, detail=f"MASTER_ADDR={cfg.master_addr}")


def _node_rank_known(cfg: DistConfig) -> bool:
    """NODE_RANK given, or derived as RANK // LOCAL_WORLD_SIZE from a given LOCAL_WORLD_SIZE
    (torchrun, or one rank per node stated): not a guess from RANK alone."""
    unknown = ("derived", "default", None)
    return cfg.sources.get("node_rank") not in unknown or (
        cfg.sources.get("node_rank") == "derived"
        and cfg.sources.get("local_world_size") not in unknown)


def _master_route(cfg: DistConfig, me: str, connect_timeout: float) -> tuple[str, Route]:
    """MASTER_ADDR's first address and this host's route to it, or the error naming why not."""
    from ddpnet.net.names import resolve_host
    from ddpnet.net.routes import route_to

    rank = cfg.rank
    res = resolve_host(cfg.master_addr, timeout=max(0.5, min(5.0, connect_timeout)))
    if not res.ok:
        raise RendezvousError(
            "master-unresolvable",
            f"MASTER_ADDR {cfg.master_addr} does not resolve{_where(me, rank)}: {res.error}",
            f"use rank 0's IP address, or add `<ip> {cfg.master_addr}` to /etc/hosts on every "
            f"node (check with `getent hosts {cfg.master_addr}`)",
            host=me, rank=rank, detail=res.error)
    addr = res.addresses[0]
    route = route_to(addr)
    if route is None:
        raise RendezvousError(
            "master-no-route",
            f"this host has no route to MASTER_ADDR {cfg.master_addr} ({addr})"
            f"{_where(me, rank)}",
            f"check MASTER_ADDR is rank 0's address on a network this node shares: "
            f"`ip route get {addr}`, `ip -br addr`", host=me, rank=rank)
    return addr, route


def _require_local_master(cfg: DistConfig, addr: str, route: Route, me: str) -> None:
    """Rank 0 hosts the store: MASTER_ADDR must be one of its own addresses."""
    if route.local or ipaddress.ip_address(addr).is_loopback:
        return
    raise RendezvousError(
        "master-no-route",
        f"MASTER_ADDR {cfg.master_addr} ({addr}) is not an address of this host, but "
        f"rank 0 hosts the rendezvous here{_where(me, cfg.rank)}",
        f"set MASTER_ADDR to this host's address (`ip -br addr`), the same on every "
        f"node, or start rank 0 on {addr}", host=me, rank=cfg.rank)


def _connect_or_raise(cfg: DistConfig, addr: str, route: Route, me: str, timeout: float,
                      connect: Connector) -> None:
    """Connect to rank 0's store until ``timeout``; raise the classified failure."""
    from ddpnet.net.routes import address_owners, neighbor_state

    attempts, elapsed = connect_loop(addr, cfg.master_port, timeout, connect=connect)
    neighbor, duplicate, path = None, None, None
    if attempts and attempts[-1].outcome in (TIMEOUT, REFUSED):
        # before a firewall (or a late rank 0) is blamed: does another host answer ARP for
        # this node's address? (the master's answers, or resets, then go to it)
        owners = address_owners(route.iface, route.src) if route.src else None
        duplicate = (route.src, route.iface, owners) if owners else None
    if attempts and attempts[-1].outcome == TIMEOUT:
        neighbor = neighbor_state(addr) if route.via is None else None
        path = path_problem(addr, route)
    error = classify_connect(attempts, addr, cfg.master_port, elapsed,
                             master=cfg.master_addr, host=me, rank=cfg.rank, neighbor=neighbor,
                             duplicate=duplicate, path=path)
    if error is not None:
        raise name_source(error, cfg.master_addr, addr, read_hosts(), me)


def path_problem(addr: str, route: Route) -> tuple[str, str, str] | None:
    """Before a timeout is blamed on a firewall, this node's kernel (``ip route get``, sends
    nothing): do its packets from ``route.src`` leave by another interface than the one the
    master's replies come back to (a policy rule)? Does it drop what the master sends on
    ``route.iface`` (rp_filter)? ``(cause, what, fix)`` or None (edge)."""
    from ddpnet.net.routes import lookup

    if not route.src or route.local:
        return None
    back = lookup(addr, route.src)
    if back is not None and back.ok and back.route is not None \
            and back.route.iface != route.iface:
        table = f" (routing table {back.table}, chosen by a policy rule)" if back.table else ""
        return ("asymmetric-route",
                f"this node's packets from {route.src} to {addr} leave by {back.route.iface}"
                f"{table}, not by {route.iface}: `{back.command}` says so",
                f"route {addr} by {route.iface} for that source too: `ip rule` and `ip route "
                f"show table all` show what sends it out {back.route.iface}"
                + (f"; e.g. ip route add {addr} dev {route.iface} table {back.table}"
                   if back.table else ""))
    into = lookup(route.src, addr, route.iface)
    if into is not None and not into.ok and into.error:
        return ("reverse-path-drop",
                f"this node's kernel drops what {addr} sends it on {route.iface}: "
                f"`{into.command}` answers '{into.error}' (rp_filter: the route back to {addr} "
                "leaves by another interface)",
                f"sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.{route.iface}.rp_filter=2 "
                "(loose), or keep one interface in that subnet")
    return None


def _bind_or_raise(cfg: DistConfig, me: str) -> None:
    try:
        check_bind("::" if ":" in cfg.master_addr else "0.0.0.0", cfg.master_port)
    except OSError as exc:
        error = classify_bind(exc, cfg.master_port, host=me, rank=cfg.rank)
        if exc.errno == errno.EADDRINUSE:
            error = who_holds(cfg, me, str(exc))
        raise error from None


# ---- what answers on MASTER_PORT ------------------------------------------------------------
#
# A TCP connect only proves that *something* listens. TCPStore's wire protocol (c10d
# TCPStoreBackend.hpp, both the libuv and the classic server) starts with VALIDATE + a magic
# number, and answers PING + nonce with the nonce: a short exchange that tells a TCPStore from
# another service (an HTTP server, a database, sshd) on the port. Silence proves nothing (a
# store may not have taken its socket over yet), so only a wrong answer or a close counts.

STORE_MAGIC = 0x3C85F7CE
_VALIDATE, _PING = 0, 13
#: probe outcomes
TCPSTORE, FOREIGN, SILENT, NO_ANSWER = "tcpstore", "foreign", "silent", "no-answer"
STORE_PROBE_TIMEOUT = 2.0
#: the PING nonce's bytes are CR LF CR LF: a line-based service (HTTP, SMTP, redis) sees the
#: end of a request and answers at once, a TCPStore echoes the number
LINE_NONCE = int.from_bytes(b"\r\n\r\n", sys.byteorder)


@dataclass(frozen=True)
class StoreProbe:
    kind: str
    reply: bytes = b""
    error: str = ""


def who_holds(cfg: DistConfig, me: str, detail: str) -> RendezvousError:
    """Rank 0 could not bind MASTER_PORT: ``port-in-use`` naming what holds it, a listener
    or a connection (edge, about a second)."""
    from ddpnet.env.jobport import read_port_range
    from ddpnet.net.ports import port_holders

    holders = port_holders(cfg.master_port)
    probe = StoreProbe(NO_ANSWER)
    if not holders or any(h.listener for h in holders):
        here = "::1" if ":" in cfg.master_addr else "127.0.0.1"
        probe = probe_store(here, cfg.master_port, 1.0)
        if probe.kind == NO_ANSWER:  # bound to another address only: try MASTER_ADDR's
            probe = probe_store(cfg.master_addr, cfg.master_port, 1.0)
    return port_in_use_error(cfg.master_port, holders, probe, host=me, rank=cfg.rank,
                             detail=detail, ephemeral=read_port_range())


def store_hello(nonce: int) -> bytes:
    """VALIDATE with the magic number, then PING ``nonce`` (native byte order, as c10d)."""
    import struct

    return struct.pack("=BI", _VALIDATE, STORE_MAGIC) + struct.pack("=BI", _PING, nonce)


def judge_store_reply(reply: bytes, closed: bool, nonce: int) -> StoreProbe:
    """What answered (pure): the nonce back is a TCPStore; other bytes or a close after our
    hello is another service; nothing yet is silence (undecided)."""
    import struct

    if len(reply) >= 4 and struct.unpack("=I", reply[:4])[0] == nonce:
        return StoreProbe(TCPSTORE, reply[:4])
    if reply or closed:
        return StoreProbe(FOREIGN, reply[:64])
    return StoreProbe(SILENT)


def probe_store(addr: str, port: int, timeout: float = STORE_PROBE_TIMEOUT) -> StoreProbe:
    """Connect, send the hello, read up to 4 bytes within ``timeout`` (edge, bounded)."""
    nonce = LINE_NONCE
    deadline = time.monotonic() + timeout
    reply, closed = b"", False
    try:
        family, where = sockaddr(addr, port)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(where)
            s.sendall(store_hello(nonce))
            while len(reply) < 4 and (left := deadline - time.monotonic()) > 0:
                s.settimeout(left)
                chunk = s.recv(64)
                if not chunk:
                    closed = True
                    break
                reply += chunk
    except TimeoutError:
        pass
    except OSError as exc:
        if not reply and exc.errno not in (errno.ECONNRESET, errno.EPIPE):
            return StoreProbe(NO_ANSWER, error=outcome_of(exc).error)
        closed = True
    return judge_store_reply(reply, closed, nonce)


def _shown(reply: bytes) -> str:
    text = reply.decode("ascii", "replace")
    printable = "".join(c if c.isprintable() else "." for c in text)
    return f"{printable!r}" if reply else "nothing (it closed the connection)"


def classify_store(probe: StoreProbe, addr: str, port: int, *, master: str = "",
                   host: str = "", rank: int | None = None, waited: float = 0.0
                   ) -> RendezvousError | None:
    """``master-port-foreign`` when the service on MASTER_PORT is not a TCPStore (pure): it
    answered the store's hello wrongly, closed on it, or stayed silent for all of ``waited``
    seconds (``SILENT`` after the caller's patience). None for a store or no answer (the
    connect loop names that)."""
    if probe.kind not in (FOREIGN, SILENT):
        return None
    named = f"MASTER_ADDR {master} ({addr})" if master and master != addr else addr
    said = (f"replied {_shown(probe.reply)} to the store's hello" if probe.kind == FOREIGN
            else f"accepted connections but never answered the store's hello in "
                 f"{waited:.1f} s (another service, or a rank 0 hung before its store)")
    return RendezvousError(
        "master-port-foreign",
        f"{_endpoint(addr, port)} answered, but not a TCPStore: {named} port {port} {said}"
        f"{_where(host, rank)}",
        f"another service holds MASTER_PORT {port} on the master: see `ss -ltnp 'sport = "
        f":{port}'` there; export MASTER_PORT=<a free port> on every node, or stop it",
        host=host, rank=rank, detail=f"reply {probe.reply!r}")


def check_store(cfg: DistConfig, *, environ: Mapping[str, str] | None = None,
                host: str | None = None, patience: float = 10.0) -> None:
    """Ranks > 0, after the preflight connected: raise ``master-port-foreign`` when what
    listens on MASTER_PORT is not a TCPStore (edge). A live store answers at once; silence is
    re-probed until ``patience`` seconds passed (a rank 0 may hold its socket before its
    store takes it over, as ``check``'s does while importing torch)."""
    from ddpnet.net.names import resolve_host

    env = os.environ if environ is None else environ
    if cfg.init_method.startswith("file://") or (cfg.rank == 0 and not _agent_store(env)):
        return
    res = resolve_host(cfg.master_addr, timeout=STORE_PROBE_TIMEOUT)
    if not res.ok:
        return  # the preflight names it
    addr, me = res.addresses[0], socket.gethostname() if host is None else host
    probe, waited = probe_until_answer(addr, cfg.master_port, patience)
    error = classify_store(probe, addr, cfg.master_port, master=cfg.master_addr, host=me,
                           rank=cfg.rank, waited=waited)
    if error is not None and not probe.reply:  # reset or silent mid-way: two hosts?
        error = duplicate_instead(addr, cfg, me) or error
    if error is not None:
        raise error


def duplicate_instead(addr: str, cfg: DistConfig, me: str) -> RendezvousError | None:
    """A connection to the store that was reset, went silent or timed out after the preflight
    got in: when another host answers ARP for this node's own address, the master's packets
    go there (edge, ~1 s). Which of the two hosts the master reaches flips with each ARP
    answer, so it is asked again at every later failure, not only at the preflight."""
    from ddpnet.net.routes import address_owners, route_to

    route = route_to(addr)
    owners = address_owners(route.iface, route.src) if route and route.src else None
    if not owners or route is None:
        return None
    named = f"MASTER_ADDR {cfg.master_addr} ({addr})" if cfg.master_addr != addr else addr
    return duplicate_error(f"the connection to {_endpoint(addr, cfg.master_port)} was reset "
                           "or went silent", named,
                           (route.src, route.iface, owners), host=me, rank=cfg.rank,
                           where=_where(me, cfg.rank))


def duplicate_of_master(cfg: DistConfig, me: str) -> RendezvousError | None:
    """:func:`duplicate_instead` for MASTER_ADDR as this node resolves it (edge, bounded;
    None when it does not resolve: the preflight names that)."""
    from ddpnet.net.names import resolve_host

    res = resolve_host(cfg.master_addr, timeout=STORE_PROBE_TIMEOUT)
    return duplicate_instead(res.addresses[0], cfg, me) if res.ok else None


def probe_until_answer(addr: str, port: int, patience: float,
                       clock: Callable[[], float] = time.monotonic) -> tuple[StoreProbe, float]:
    """Probe until something other than silence, or ``patience`` seconds (edge)."""
    start = clock()
    while True:
        left = patience - (clock() - start)
        probe = probe_store(addr, port, max(0.2, min(STORE_PROBE_TIMEOUT, left)))
        if probe.kind != SILENT or clock() - start >= patience:
            return probe, clock() - start
        time.sleep(0.2)


def port_in_use_error(port: int, holders: tuple[Holder, ...], probe: StoreProbe, *,
                      host: str = "", rank: int | None = None, detail: str = "",
                      ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL) -> RendezvousError:
    """``port-in-use`` on rank 0 explained by what holds the port (pure): a listener (its
    PID and command when visible, and whether it is a TCPStore, a stale store of an earlier
    job, or not), else the connections whose local port it is (an outgoing connection the
    kernel gave it from ``ephemeral``, ip_local_port_range), each with its process and user."""
    listeners = tuple(h for h in holders if h.listener)
    if listeners or not holders:
        return _held_by_listener(port, listeners, probe, host=host, rank=rank, detail=detail)
    low, high = ephemeral
    inside = low <= port <= high
    how = (f"the kernel hands out ports {low}-{high} (net.ipv4.ip_local_port_range) as the "
           f"source port of outgoing connections, and {port} is one of them" if inside else
           f"{port} is outside the ephemeral range {low}-{high}, so the process bound it "
           "itself")
    shown = "; ".join(h.describe() for h in holders)
    other = next(p for p in (TORCH_DEFAULT_PORT, low - 1, high + 1)
                 if p != port and not low <= p <= high and 1024 < p < 65536)
    reserve = (f"; or keep the kernel from handing {port} out: `ddpnet tune --master-port "
               f"{port}` reserves it (net.ipv4.ip_local_reserved_ports), or narrow the range "
               f"with `ddpnet tune --port-range LO-HI`; either takes effect for new "
               "connections") if inside else ""
    return RendezvousError(
        "port-in-use",
        f"MASTER_PORT {port} is already in use on the rank-0 host{_where(host, rank)}: not by "
        f"a listener but as the local port of {len(holders)} connection(s) ({shown}): {how}",
        f"export MASTER_PORT={other} (outside {low}-{high}) on every node{reserve}; "
        f"`ss -tanp 'sport = :{port}'` shows the connection(s)",
        host=host, rank=rank, detail=detail)


def _held_by_listener(port: int, holders: tuple[Holder, ...], probe: StoreProbe, *,
                      host: str, rank: int | None, detail: str) -> RendezvousError:
    what = {TCPSTORE: "a TCPStore (an earlier job's rank 0 or torchrun agent still running?)",
            FOREIGN: f"another service (it replied {_shown(probe.reply)} to a TCPStore hello)",
            SILENT: "another service (it did not answer a TCPStore hello)",
            }.get(probe.kind, "a listener")
    who = ", ".join(h.describe() for h in holders) or "a process this user cannot see"
    pids = [str(h.pid) for h in holders if h.pid is not None]
    see = f"`ss -ltnp 'sport = :{port}'`" + ("" if pids else " (as root)")
    kill = f"kill {' '.join(pids)}" if pids else "stop it"
    return RendezvousError(
        "port-in-use",
        f"MASTER_PORT {port} is already in use on the rank-0 host{_where(host, rank)}: "
        f"{what}, held by {who}",
        f"see who holds it: {see}; {kill} if it is a stale job, or export "
        f"MASTER_PORT=<free port> on every node", host=host, rank=rank, detail=detail)
