"""rdma family: InfiniBand/RoCE devices and port states from /sys/class/infiniband, the
locked-memory limit RDMA needs, and the syntax of NCCL_IB_HCA."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs
from ddpnet.doctor.software import read_limits


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED
    phys_state: str  # LinkUp, Disabled, Polling
    link_layer: str  # InfiniBand, Ethernet (RoCE)
    rate: str


def _after_colon(text: str | None) -> str:
    if text is None:
        return "unknown"
    text = text.strip()
    return text.split(":", 1)[1].strip() if ":" in text else text


def read_ports(host: Host) -> list[IbPort]:
    root = host.sys / "class" / "infiniband"
    ports: list[IbPort] = []
    if not root.is_dir():
        return ports
    for dev in sorted(root.iterdir()):
        pdir = dev / "ports"
        for p in sorted(pdir.iterdir()) if pdir.is_dir() else []:
            if not p.name.isdigit():
                continue
            ports.append(IbPort(
                dev.name, int(p.name), _after_colon(host.read(p / "state")),
                _after_colon(host.read(p / "phys_state")),
                (host.read(p / "link_layer") or "InfiniBand").strip(),
                (host.read(p / "rate") or "").strip(),
            ))
    return ports


def ports_of(host: Host) -> list[IbPort]:
    return host.memo.get("rdma", lambda: read_ports(host))


class Devices(Check):
    id = "rdma.devices"
    family = "rdma"
    title = "InfiniBand / RoCE ports"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        ports = ports_of(host)
        facts = {"rdma": [f"{p.device}:{p.port} {p.state} {p.link_layer} {p.rate}".strip()
                          for p in ports]}
        if not ports:
            return self.skip("no InfiniBand/RoCE devices (/sys/class/infiniband empty)",
                             **facts)
        listing = "; ".join(facts["rdma"])
        down = [p for p in ports if p.state != "ACTIVE"]
        if len(down) == len(ports):
            return self.fail("no RDMA port is ACTIVE", listing,
                             "check cabling and the subnet manager (ibstat; systemctl start "
                             "opensm on one node of an IB fabric), or export NCCL_IB_DISABLE=1 "
                             "to use sockets", **facts)
        if down:
            names = ", ".join(f"{p.device}:{p.port} ({p.state})" for p in down)
            return self.warn(f"RDMA ports not ACTIVE: {names}", listing,
                             "exclude them: export NCCL_IB_HCA=" + ",".join(
                                 f"={p.device}:{p.port}" for p in ports if p not in down),
                             **facts)
        return self.ok(f"{len(ports)} RDMA port(s) ACTIVE", listing, **facts)


class Memlock(Check):
    id = "rdma.memlock"
    family = "rdma"
    title = "locked memory for RDMA"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        if not ports_of(host):
            return self.skip("no RDMA devices")
        soft = read_limits(host).get("Max locked memory", (None, None))[0]
        if soft in (None, "unlimited"):
            return self.ok(f"ulimit -l {soft or 'unknown'}")
        return self.warn(
            f"ulimit -l is {soft} bytes: RDMA memory registration may fail",
            "NCCL over InfiniBand/RoCE pins its buffers",
            "add '* soft memlock unlimited' and '* hard memlock unlimited' to "
            "/etc/security/limits.d/90-ddpnet.conf (and LimitMEMLOCK=infinity for slurmd)")


_HCA_TOKEN = re.compile(r"^[A-Za-z0-9_.\-]+(?::\d+)?$")


def parse_ib_hca(value: str) -> tuple[list[str], str | None]:
    """``[^][=]dev[:port],dev[:port]`` -> (device names, syntax error or None)."""
    text = value.strip()
    if not text:
        return [], "empty value"
    if text.startswith("^"):
        text = text[1:]
    if text.startswith("="):
        text = text[1:]
    devices: list[str] = []
    for token in text.split(","):
        if not _HCA_TOKEN.match(token):
            return devices, f"{token!r} is not dev or dev:port"
        devices.append(token.split(":")[0])
    return devices, None


class IbHca(Check):
    id = "rdma.nccl-ib-hca"
    family = "rdma"
    title = "NCCL_IB_HCA"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        value = host.environ.get("NCCL_IB_HCA")
        if value is None:
            return self.skip("NCCL_IB_HCA not set (NCCL uses every ACTIVE port)")
        devices, error = parse_ib_hca(value)
        syntax = "NCCL_IB_HCA=[^][=]mlx5_0[:1],mlx5_1[:1] (^ excludes, = exact names)"
        if error:
            return self.fail(f"NCCL_IB_HCA={value!r}: {error}", "", f"use {syntax}")
        present = {p.device for p in ports_of(host)}
        exact = value.lstrip("^").startswith("=")
        missing = [d for d in devices
                   if (d not in present if exact else not any(p.startswith(d) for p in present))]
        if missing and not value.startswith("^"):
            return self.fail(
                f"NCCL_IB_HCA names devices this node lacks: {', '.join(missing)}",
                f"present: {', '.join(sorted(present)) or 'none'}",
                f"set NCCL_IB_HCA to this node's devices ({syntax}) or unset it")
        return self.ok(f"NCCL_IB_HCA={value}")


CHECKS: tuple[Check, ...] = (Devices(), Memlock(), IbHca())
