"""rendezvous family: the resolved config is valid, and the rendezvous ports are free on the
rank-0 host and safe from the kernel's ephemeral port allocator."""

from __future__ import annotations

import ipaddress

from ddpnet.address import parse_address
from ddpnet.doctor.base import Check, CheckResult, Host, Inputs, Status
from ddpnet.env.jobport import C10D_PORT, parse_port_range
from ddpnet.errors import ConfigError
from ddpnet.net.interfaces import Address, Interface
from ddpnet.net.ports import TcpSocket, parse_proc_tcp
from ddpnet.net.zones import ZoneVerdict, judge_zone


def port_sockets(host: Host) -> list[TcpSocket]:
    """Every TCP socket of this node, from ``/proc/net/tcp`` and ``tcp6`` (no sockets
    opened; the one parser, ``net.ports.parse_proc_tcp``)."""
    out: list[TcpSocket] = []
    for name in ("tcp", "tcp6"):
        out += parse_proc_tcp(host.read(host.proc / "net" / name) or "")
    return out


def listening_ports(host: Host) -> set[int]:
    """TCP ports in LISTEN state."""
    return {s.local_port for s in port_sockets(host) if s.state == "LISTEN"}


def connection_holders(host: Host, port: int) -> list[TcpSocket]:
    """Connections whose local port is ``port`` and that keep a listener off it (TIME_WAIT
    does not: TCPStore binds with SO_REUSEADDR)."""
    return [s for s in port_sockets(host) if s.local_port == port
            and s.state not in ("LISTEN", "TIME_WAIT")]


def parse_reserved(text: str) -> set[int]:
    """``"29400,29500-29510"`` -> the set of ports (``ip_local_reserved_ports`` syntax)."""
    ports: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            # ports end at 65535: a bogus huge range must not fill memory
            ports.update(range(int(low), min(int(high or low), 65535) + 1))
        except ValueError:
            continue
    return ports


def local_addresses(inputs: Inputs) -> set[str]:
    return {a.ip for i in inputs.interfaces for a in i.addresses}


def is_master_host(host: Host, inputs: Inputs) -> tuple[bool, str]:
    """Whether this node hosts rank 0 (the TCPStore), and how we know."""
    addr = inputs.master_addr
    try:
        if ipaddress.ip_address(addr).is_loopback:
            return True, f"MASTER_ADDR {addr} is loopback"
    except ValueError:
        if addr in (host.hostname, host.hostname.split(".")[0], "localhost"):
            return True, f"MASTER_ADDR {addr} is this host's name"
    if addr in local_addresses(inputs):
        return True, f"MASTER_ADDR {addr} is an address of this host"
    if inputs.num_nodes > 1 and inputs.node_rank == 0 and inputs.launcher != "local":
        return True, "this is node rank 0"
    return False, f"MASTER_ADDR {addr} is another host"


class ConfigValid(Check):
    id = "rendezvous.config"
    family = "rendezvous"
    title = "resolved configuration"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        if inputs.config_error is not None:
            message, hint = inputs.config_error
            return self.fail(f"configuration invalid: {message}", "", hint)
        verdict = zone_verdict(inputs)
        if verdict is not None:  # check's and init()'s master-link-local, on this node
            return self.fail(f"MASTER_ADDR {verdict.address.text} cannot be used as written "
                             f"here ({verdict.problem})", verdict.why(), verdict.fix(),
                             evidence=verdict.evidence())
        return self.ok(inputs.config_summary or "configuration valid")


def zone_verdict(inputs: Inputs) -> ZoneVerdict | None:
    """A link-local MASTER_ADDR judged against this node's interfaces (pure)."""
    try:
        address = parse_address(inputs.master_addr, "MASTER_ADDR")
    except ConfigError:
        return None  # rendezvous.config names a bad value
    if not address.link_local:
        return None
    interfaces = [Interface(i.name, i.up, tuple(Address(a.ip, a.prefix, a.family)
                                                for a in i.addresses),
                            i.mtu, i.speed_mbps, i.kind) for i in inputs.interfaces]
    return judge_zone(address, interfaces)


class PortCheck(Check):
    family = "rendezvous"

    def __init__(self, check_id: str, title: str) -> None:
        self.id = check_id  # type: ignore[misc]
        self.title = title  # type: ignore[misc]

    def port(self, inputs: Inputs) -> int | None:
        return inputs.master_port

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        port = self.port(inputs)
        if port is None:
            return self.skip("static rendezvous: torchrun's c10d port 29400 is not used")
        master, why = is_master_host(host, inputs)
        low, high = parse_port_range(
            host.sysctl("net.ipv4.ip_local_port_range") or "32768 60999")
        reserved = parse_reserved(host.sysctl("net.ipv4.ip_local_reserved_ports") or "")
        facts = {"ephemeral_range": [low, high]}
        problems: list[tuple[str, str, str, str]] = []  # status, summary, detail, fix
        if master and port in listening_ports(host):
            problems.append((
                "fail", f"port {port} is already in use on this rank-0 host",
                f"{why}; a process listens on TCP {port}, the TCPStore cannot bind it",
                f"find it with: ss -ltnp 'sport = :{port}' ; stop it or pick another port "
                "(export MASTER_PORT=<free port> on every node)",
            ))
        held = _outgoing(host, port, (low, high), why) if master else None
        if held is not None:
            problems.append(held)
        if low <= port <= high and port not in reserved:
            problems.append((
                "warn", f"port {port} is inside the ephemeral range {low}-{high}",
                "any outgoing connection on the rank-0 host may take it first "
                "(port-in-use at random)",
                f"sysctl -w net.ipv4.ip_local_reserved_ports={_add_reserved(host, port)} "
                "or pick a port below "
                f"{low}",
            ))
        if not problems:
            where = why if master else f"not the rank-0 host ({why})"
            return self.ok(f"port {port} is free and outside the ephemeral range {low}-{high}"
                           if master else f"port {port} outside the ephemeral range", where,
                           **facts)
        worst: Status = "fail" if any(p[0] == "fail" for p in problems) else "warn"
        return self.result(
            worst, "; ".join(p[1] for p in problems), "; ".join(p[2] for p in problems),
            " ; ".join(p[3] for p in problems), facts,
        )


def _outgoing(host: Host, port: int, ephemeral: tuple[int, int], why: str
              ) -> tuple[str, str, str, str] | None:
    """The problem when an outgoing connection holds ``port`` with no listener on it: the
    kernel gave it (inside the ephemeral range) to a connection to a service port (outside
    it), which keeps TCPStore's listener off it. An accepted connection (its peer's port
    ephemeral) of a listener that is gone does not (SO_REUSEADDR, like TCPStore's)."""
    low, high = ephemeral
    if not low <= port <= high or port in listening_ports(host):
        return None
    held = [s for s in connection_holders(host, port) if not low <= s.remote_port <= high]
    if not held:
        return None
    shown = ", ".join(f"{s.state} {s.local}:{port} -> {s.remote}:{s.remote_port} (uid {s.uid})"
                      for s in held)
    return ("fail", f"port {port} is the local port of {len(held)} connection(s) on this "
            "rank-0 host",
            f"{why}; not a listener: {shown}; the kernel gave it from the ephemeral range "
            f"{low}-{high}",
            f"export MASTER_PORT=<a free port outside {low}-{high}> on every node; "
            f"`ss -tanp 'sport = :{port}'` shows the process")


def _add_reserved(host: Host, port: int) -> str:
    current = (host.sysctl("net.ipv4.ip_local_reserved_ports") or "").strip()
    return f"{current},{port}" if current else str(port)


class MasterPort(PortCheck):
    def __init__(self) -> None:
        super().__init__("rendezvous.master-port", "MASTER_PORT")


class C10dPort(PortCheck):
    def __init__(self) -> None:
        super().__init__("rendezvous.c10d-port", "torchrun c10d port")

    def port(self, inputs: Inputs) -> int | None:
        return C10D_PORT if inputs.c10d and inputs.master_port != C10D_PORT else None




CHECKS: tuple[Check, ...] = (ConfigValid(), MasterPort(), C10dPort())
