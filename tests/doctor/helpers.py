"""Fixture hosts for check tests: a tmp tree standing in for /proc, /sys, /etc, /var, a canned
command runner and resolver, and interfaces shaped like ``ddpnet.net.interfaces.Interface``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpnet.doctor.base import CommandOutput, Host, Inputs, SelectedInterface
from ddpnet.net.interfaces import Address, Interface

FIXTURES = Path(__file__).parent / "fixtures"


def Addr(ip: str, prefix: int, family: int = 4) -> Address:
    return Address(ip, prefix, family)


def Iface(name: str, up: bool = True, addresses: tuple[Address, ...] = (),
          mtu: int = 1500, speed_mbps: int | None = 10000, kind: str = "physical"
          ) -> Interface:
    """A ``ddpnet.net.interfaces.Interface`` with test defaults."""
    return Interface(name, up, addresses, mtu, speed_mbps, kind)


LO = Iface("lo", addresses=(Addr("127.0.0.1", 8),), mtu=65536, speed_mbps=None, kind="loopback")
ETH0 = Iface("eth0", addresses=(Addr("198.18.0.3", 24),))


def inputs(**kw: Any) -> Inputs:
    base: dict[str, Any] = dict(
        master_addr="198.18.0.1", master_port=29500, world_size=8, num_nodes=2, node_rank=1,
        launcher="torchrun", interfaces=(LO, ETH0),
        selected=SelectedInterface("eth0", "198.18.0.3", "routes to MASTER_ADDR"),
    )
    base.update(kw)
    return Inputs(**base)


class Tree:
    """A fake root: ``tree.write("proc/sys/net/core/rmem_max", "4194304")``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("proc", "sys", "etc", "dev", "var", "cache"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def sysctls(self, values: Mapping[str, str]) -> None:
        for name, value in values.items():
            self.write("proc/sys/" + name.replace(".", "/"), value + "\n")

    def host(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        hostname: str = "node1",
        commands: Mapping[tuple[str, ...], CommandOutput | None] | None = None,
        names: Mapping[str, Sequence[str]] | None = None,
        programs: Sequence[str] = (),
        native: Mapping[str, Any] | None = None,
        cache: bool = False,
    ) -> Host:
        table = dict(commands or {})
        calls: list[tuple[str, ...]] = []

        def run(argv: Sequence[str], timeout: float) -> CommandOutput | None:
            key = tuple(argv)
            calls.append(key)
            for pattern, out in table.items():
                if key[: len(pattern)] == pattern:
                    return out
            return None

        lookup = dict(names or {})

        def resolve(name: str) -> Sequence[str]:
            if name not in lookup:
                raise OSError(f"[Errno -2] Name or service not known: {name}")
            return lookup[name]

        progs = set(programs) | {p[0] for p in table}

        def which(name: str) -> str | None:
            return f"/usr/sbin/{name}" if name in progs else None

        host = Host(
            proc=self.root / "proc", sys=self.root / "sys", etc=self.root / "etc",
            dev=self.root / "dev", var=self.root / "var", environ=dict(environ or {}),
            hostname=hostname, run=run, resolve=resolve, which=which,
            cache=self.root / "cache" if cache else None,
            native=lambda: dict(native or {}),
        )
        object.__setattr__(host, "calls", calls)
        return host


def ok(stdout: str, rc: int = 0) -> CommandOutput:
    return CommandOutput(rc, stdout, "")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()



#: sysctls of a healthy 10 Gb/s node
GOOD_SYSCTLS = {
    "net.core.rmem_max": "67108864", "net.core.wmem_max": "67108864",
    "net.ipv4.tcp_rmem": "4096\t131072\t67108864", "net.ipv4.tcp_wmem": "4096\t65536\t67108864",
    "net.core.somaxconn": "4096", "net.ipv4.tcp_max_syn_backlog": "8192",
    "net.ipv4.tcp_fin_timeout": "15", "net.ipv4.ip_local_port_range": "32768\t60999",
    "net.ipv4.ip_local_reserved_ports": "",
}

