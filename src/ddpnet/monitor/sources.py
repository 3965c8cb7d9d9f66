"""Raw counters: /proc/net/dev, /proc/net/snmp, per-socket bytes (``ss -tin``), GPUs (NVML).

Parsers are pure functions of text; :class:`SystemSources` is the edge that reads this host and
can be replaced by any object with the same methods (tests feed counters).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ddpnet.subproc import run_command


@dataclass(frozen=True)
class IfCounters:
    """Cumulative counters of one interface, as the kernel reports them."""

    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int
    rx_errors: int
    tx_errors: int
    rx_drops: int
    tx_drops: int


@dataclass(frozen=True)
class SocketBytes:
    """One TCP connection's cumulative payload bytes (acked out, received in)."""

    local: str
    remote: str
    sent: int
    received: int


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    util_percent: float
    memory_used_mib: float
    memory_total_mib: float
    power_w: float | None
    pcie_tx_mbps: float | None
    pcie_rx_mbps: float | None


@dataclass(frozen=True)
class Snapshot:
    """Everything read at one instant; rates are differences of two snapshots."""

    time: float
    interfaces: dict[str, IfCounters]
    tcp_retrans_segs: int
    tcp_out_segs: int
    sockets: tuple[SocketBytes, ...] = ()
    gpus: tuple[GpuReading, ...] = ()
    link_mbps: dict[str, int | None] = field(default_factory=dict)


def parse_netdev(text: str) -> dict[str, IfCounters]:
    """Parse /proc/net/dev (two header lines, then ``name: 16 counters``)."""
    out: dict[str, IfCounters] = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) < 16 or not all(w.isascii() and w.isdigit() for w in words):
            continue  # a header or a damaged line: not 16 counters
        f = [int(w) for w in words]
        out[name.strip()] = IfCounters(
            rx_bytes=f[0], rx_packets=f[1], rx_errors=f[2], rx_drops=f[3],
            tx_bytes=f[8], tx_packets=f[9], tx_errors=f[10], tx_drops=f[11],
        )
    return out


def parse_snmp_tcp(text: str) -> tuple[int, int]:
    """(RetransSegs, OutSegs) from /proc/net/snmp's two ``Tcp:`` lines."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith("Tcp:")]
    if len(rows) < 2:
        return 0, 0
    table = dict(zip(rows[0], rows[1], strict=False))
    return int(table.get("RetransSegs", 0)), int(table.get("OutSegs", 0))


def parse_ss(text: str) -> tuple[SocketBytes, ...]:
    """Parse ``ss -tinH``: a socket line (state, queues, local, peer) then an info line."""
    out: list[SocketBytes] = []
    local = remote = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            local, remote = (parts[3], parts[4]) if len(parts) >= 5 else (None, None)
            continue
        if local is None or remote is None:
            continue
        info = dict(
            tok.split(":", 1) for tok in line.split() if ":" in tok and not tok.startswith("(")
        )
        sent = _int(info.get("bytes_acked", info.get("bytes_sent", "0")))
        received = _int(info.get("bytes_received", "0"))
        out.append(SocketBytes(local, remote, sent, received))
        local = remote = None
    return tuple(out)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def strip_port(endpoint: str) -> str:
    """``198.18.0.1:5201`` -> ``198.18.0.1``; ``[fd00::1]:80`` -> ``fd00::1``."""
    host, _, _ = endpoint.rpartition(":")
    host = host.strip("[]")
    if host.startswith("::ffff:"):
        host = host[len("::ffff:"):]
    return host.split("%")[0]


def read_link_mbps(name: str, sys_root: Path = Path("/sys")) -> int | None:
    """Nominal speed from sysfs; None where the driver does not say (lo, some virtual)."""
    try:
        value = int((sys_root / "class/net" / name / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


class Sources(Protocol):
    """What a monitor reads; tests pass an object that returns fixture counters."""

    def snapshot(self, peers: bool, gpus: bool) -> Snapshot: ...


class NvmlGpus:
    """GPUs through nvidia-ml-py; ``available`` is False (and nothing raises) without it."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self.available = False
        self.reason = ""
        if self._nvml is None:
            try:
                import pynvml

                self._nvml = pynvml
            except ImportError:
                self.reason = "nvidia-ml-py not installed (pip install 'ddpnet[gpu]')"
                return
        try:
            self._nvml.nvmlInit()
            self.available = True
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.reason = f"no NVIDIA driver/GPU ({exc.__class__.__name__})"

    def read(self) -> tuple[GpuReading, ...]:
        if not self.available or self._nvml is None:
            return ()
        nv = self._nvml
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            util = nv.nvmlDeviceGetUtilizationRates(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            power = _optional(nv.nvmlDeviceGetPowerUsage, h, scale=1e-3)  # mW -> W
            tx = _optional(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES,
                           scale=1e-3)  # KB/s -> MB/s
            rx = _optional(nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES,
                           scale=1e-3)
            out.append(GpuReading(
                index=i, name=name.decode() if isinstance(name, bytes) else str(name),
                util_percent=float(util.gpu), memory_used_mib=mem.used / 2**20,
                memory_total_mib=mem.total / 2**20, power_w=power,
                pcie_tx_mbps=tx, pcie_rx_mbps=rx,
            ))
        return tuple(out)


def _optional(read: Callable[..., Any], *args: Any, scale: float = 1.0) -> float | None:
    """A reading some GPUs do not support (NVMLError_NotSupported) becomes None."""
    try:
        return float(read(*args)) * scale
    except Exception:
        return None


class SystemSources:
    """This host's counters (edge). ``proc``/``sys_root`` are injectable roots."""

    def __init__(self, proc: Path = Path("/proc"), sys_root: Path = Path("/sys"),
                 gpus: NvmlGpus | None = None, ss_timeout: float = 2.0) -> None:
        self.proc = proc
        self.sys_root = sys_root
        self._gpus = gpus
        self.ss_timeout = ss_timeout

    @property
    def gpus(self) -> NvmlGpus:
        if self._gpus is None:
            self._gpus = NvmlGpus()
        return self._gpus

    def sockets(self) -> tuple[SocketBytes, ...]:
        ss = shutil.which("ss")
        if ss is None:
            return ()
        proc = run_command([ss, "-tinH"], self.ss_timeout)
        return parse_ss(proc.stdout) if proc is not None else ()

    def snapshot(self, peers: bool, gpus: bool) -> Snapshot:
        now = time.time()
        interfaces = parse_netdev((self.proc / "net/dev").read_text())
        retrans, out_segs = parse_snmp_tcp((self.proc / "net/snmp").read_text())
        return Snapshot(
            time=now, interfaces=interfaces, tcp_retrans_segs=retrans, tcp_out_segs=out_segs,
            sockets=self.sockets() if peers else (),
            gpus=self.gpus.read() if gpus else (),
            link_mbps={n: read_link_mbps(n, self.sys_root) for n in interfaces},
        )
