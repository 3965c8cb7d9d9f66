"""rendezvous family: the resolved config is valid, and the rendezvous ports are free on the
rank-0 host and safe from the kernel's ephemeral port allocator."""

from __future__ import annotations

import ipaddress

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs, Status
from ddpnet.env.jobport import C10D_PORT, parse_port_range

_LISTEN = "0A"


def listening_ports(host: Host) -> set[int]:
    """TCP ports in LISTEN state, from ``/proc/net/tcp`` and ``tcp6`` (no sockets opened)."""
    ports: set[int] = set()
    for name in ("tcp", "tcp6"):
        text = host.read(host.proc / "net" / name) or ""
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _LISTEN:
                try:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
                except (IndexError, ValueError):
                    continue
    return ports


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
        return self.ok(inputs.config_summary or "configuration valid")


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
