"""The link baseline: the rate one TCP stream carries between nodes on the interface the
backend uses, measured in the same run (iperf3 ``-J`` when installed, else our own TCP
stream), plus the NIC's nominal speed from sysfs.

Pairs form a ring over one rank per host (host = the address the rank talks from), all
streams at once, as a ring collective loads the links: the time is O(1) in the node count and
each node sends one stream and receives one. One host alone measures rank 0 -> rank 1.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpnet.bench.result import LinkRate, PairRate
from ddpnet.errors import RequirementError
from ddpnet.net.interfaces import Interface, kernel_order, list_interfaces, owner_of
from ddpnet.net.picks import GLOO, NCCL, library_picks
from ddpnet.net.ports import free_port
from ddpnet.net.select import select_for_host
from ddpnet.subproc import run_tool

AllGather = Callable[[Any], list[Any]]

#: bounded waits (seconds) around every network step
SERVER_START_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Endpoint:
    rank: int
    address: str
    interface: str | None
    has_iperf3: bool


# ---------------------------------------------------------------- pure decisions


def plan_pairs(endpoints: Sequence[Endpoint]) -> list[tuple[int, int]]:
    """(src, dst) rank pairs: a ring over the first rank of each address; one host -> 0->1."""
    leaders: dict[str, int] = {}
    for ep in sorted(endpoints, key=lambda e: e.rank):
        leaders.setdefault(ep.address, ep.rank)
    ranks = list(leaders.values())
    if len(ranks) >= 2:
        return [(ranks[i], ranks[(i + 1) % len(ranks)]) for i in range(len(ranks))]
    everyone = sorted(ep.rank for ep in endpoints)
    return [(everyone[0], everyone[1])] if len(everyone) >= 2 else []


def choose_method(requested: str, endpoints: Sequence[Endpoint]) -> tuple[str, str]:
    """(method, note). ``auto``: iperf3 when every node has it, else our own TCP stream."""
    missing = [ep.rank for ep in endpoints if not ep.has_iperf3]
    if requested == "iperf3" and missing:
        raise RequirementError(
            f"--baseline iperf3: iperf3 is not installed on rank(s) "
            f"{', '.join(map(str, missing[:8]))}",
            "install iperf3 on every node (apt-get install iperf3) or use --baseline tcp",
        )
    if requested == "auto":
        if missing:
            return "tcp", "iperf3 missing on some nodes: own TCP stream used"
        return "iperf3", ""
    return requested, ""


def parse_iperf3(text: str) -> float:
    """Receiver-side rate (Gb/s) from ``iperf3 -c ... -J`` output; ValueError on errors."""
    data = json.loads(text)
    if data.get("error"):
        raise ValueError(str(data["error"]))
    end = data.get("end", {})
    summary = end.get("sum_received") or end.get("sum")
    if not summary or "bits_per_second" not in summary:
        raise ValueError("iperf3 JSON has no end.sum_received")
    return float(summary["bits_per_second"]) / 1e9


def nominal_gbps(interface: Interface | None) -> float | None:
    """The NIC's negotiated speed in Gb/s (sysfs, read by ``net.interfaces``); None when
    unknown (virtual links report none)."""
    if interface is None or interface.speed_mbps is None:
        return None
    return interface.speed_mbps / 1000.0


def summarize(method: str, pairs: Sequence[PairRate], nominal: float | None,
              interface: str | None, note: str, loopback: bool = False) -> LinkRate:
    rates = [p.gbps for p in pairs if p.gbps is not None]
    if not rates and pairs:
        note = "; ".join(filter(None, [note, "no pair could be measured: " + pairs[0].error]))
    return LinkRate(min(rates) if rates else None, method, nominal, interface, tuple(pairs),
                    note, loopback)


# ---------------------------------------------------------------- edges


def local_address(environ: Mapping[str, str], backend: str, interfaces: Sequence[Interface],
                  selected: str | None, order: Sequence[str] = ()) -> str:
    """The address this rank's backend talks from (pure): what the library binds for the
    user's NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME as it reads them (``net.picks``: NCCL's
    prefixes, ``=`` and ``^``, gloo's first device), else the selector's address toward
    MASTER_ADDR (``selected``), else loopback."""
    var = NCCL if backend == "nccl" else GLOO
    pick = next((p for p in library_picks(environ, interfaces, order)
                 if p.var == var and p.value and p.address), None)
    if pick is not None and pick.address is not None:
        return pick.address
    return selected or "127.0.0.1"


def local_endpoint(rank: int, environ: Mapping[str, str], backend: str, master_addr: str
                   ) -> tuple[Endpoint, Interface | None]:
    """This rank's address, the interface holding it, and whether iperf3 is here (edge)."""
    interfaces = list_interfaces()
    selected = select_for_host(environ={**environ, "MASTER_ADDR": master_addr}).address
    address = local_address(environ, backend, interfaces, selected, kernel_order())
    iface = owner_of(address, interfaces)
    me = Endpoint(rank, address, iface.name if iface else None,
                  shutil.which("iperf3") is not None)
    return me, iface


class Iperf3Server:
    """``iperf3 -s -1``: one test, then exit; started() waits for "Server listening"."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.port = free_port(address)
        self.proc = subprocess.Popen(
            ["iperf3", "-s", "-1", "-B", address, "-p", str(self.port), "--forceflush"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )

    def started(self, timeout: float = SERVER_START_TIMEOUT) -> None:
        """Wait for "Server listening" (raw reads: a buffered reader would hide lines from
        select)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        seen = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                seen += chunk
                if b"listening" in seen.lower():
                    return
                if not chunk:
                    break
        self.proc.kill()
        self.proc.wait()
        raise OSError(f"iperf3 server on {self.address}:{self.port} did not start: "
                      f"{seen.decode(errors='replace').strip()[-200:]}")

    def close(self, timeout: float = 5.0) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def iperf3_client(src: str, dst: str, port: int, seconds: float) -> float:
    omit = 1 if seconds >= 2 else 0
    argv = ["iperf3", "-c", dst, "-p", str(port), "-B", src, "-t", str(max(1, round(seconds))),
            "-O", str(omit), "-J", "--connect-timeout", str(int(CONNECT_TIMEOUT * 1000))]
    proc = run_tool(argv, seconds + omit + 30)
    try:
        return parse_iperf3(proc.stdout)
    except ValueError as exc:
        raise OSError(f"iperf3 {src} -> {dst}:{port}: {exc}") from exc


class TcpSink:
    """Our own receiver: accept one stream, count bytes after an ``omit`` warm-up, rate at EOF."""

    def __init__(self, address: str, seconds: float) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((address, 0))
        self.sock.listen(1)
        self.sock.settimeout(seconds + 60)
        self.port = int(self.sock.getsockname()[1])
        self.omit = min(1.0, seconds / 4)
        self.gbps: float | None = None
        self.error = ""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
            with conn:
                conn.settimeout(CONNECT_TIMEOUT * 6)
                buf = bytearray(1 << 20)
                view = memoryview(buf)
                total, first, mark, mark_bytes = 0, 0.0, 0.0, 0
                while True:
                    got = conn.recv_into(view)
                    now = time.perf_counter()
                    if not got:
                        break
                    if not first:
                        first = now
                    total += got
                    if not mark and now - first >= self.omit:
                        mark, mark_bytes = now, total
                end = time.perf_counter()
                if not mark:
                    mark, mark_bytes = first, 0
                if end > mark:
                    self.gbps = (total - mark_bytes) * 8 / (end - mark) / 1e9
        except OSError as exc:
            self.error = f"tcp sink: {exc}"
        finally:
            self.sock.close()

    def close(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.error = self.error or "tcp sink: no stream finished in time"


def tcp_source(src: str, dst: str, port: int, seconds: float) -> None:
    """Send as fast as the socket takes for ``seconds``, then close and wait for the peer."""
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    payload = memoryview(os.urandom(1 << 20))
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((src, 0))
        s.settimeout(CONNECT_TIMEOUT)
        s.connect((dst, port))
        s.settimeout(CONNECT_TIMEOUT * 6)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the sink closes once it has read everything


def on_loopback(endpoints: Sequence[Endpoint], address: str) -> bool:
    """Every rank is on this one host, talking over loopback."""
    return len({e.address for e in endpoints}) == 1 and address.startswith(("127.", "::1"))


def loopback_note(note: str, endpoints: Sequence[Endpoint], address: str) -> str:
    """Say so when every rank is on this one host talking over loopback."""
    if on_loopback(endpoints, address):
        return "; ".join(filter(None, [note, "loopback: all ranks on one host, so this "
                                       "measures memory copies, not a network"]))
    return note


def merge_pairs(pairs: Sequence[tuple[int, int]],
                reports: Sequence[Sequence[PairRate]]) -> list[PairRate]:
    """Every planned pair from what the ranks reported (a pair appears once: from the sender
    for iperf3, from the sink for tcp); a measured rate wins over an error."""
    seen: dict[tuple[int, int], PairRate] = {}
    for part in reports:
        for pr in part:
            if (pr.src, pr.dst) not in seen or seen[(pr.src, pr.dst)].gbps is None:
                seen[(pr.src, pr.dst)] = pr
    return [seen.get(p, PairRate(p[0], p[1], None, "not reported")) for p in pairs]


def measure_link(
    requested: str,
    seconds: float,
    rank: int,
    allgather: AllGather,
    *,
    backend: str,
    environ: Mapping[str, str],
    master_addr: str,
) -> LinkRate:
    """Collective over all ranks (every rank must call it): the link baseline."""
    if requested == "none":
        return LinkRate(None, "none", note="--baseline none")
    me, iface = local_endpoint(rank, environ, backend, master_addr)
    endpoints: list[Endpoint] = allgather(me)
    pairs = plan_pairs(endpoints)
    nominal = nominal_gbps(iface)
    if not pairs:
        return LinkRate(None, "none", nominal, me.interface,
                        note="one rank: no link to measure")
    method, note = choose_method(requested, endpoints)
    note = loopback_note(note, endpoints, me.address)
    streams = Streams(method, seconds, me, {ep.rank: ep for ep in endpoints}, allgather)
    mine = streams.run(pairs)
    return summarize(method, merge_pairs(pairs, allgather(mine)), nominal, me.interface, note,
                     on_loopback(endpoints, me.address))


class Streams:
    """One rank's part of the measurement: listen where it receives, publish the ports, then
    stream where it sends, all pairs at once (collective: ``allgather`` in the middle)."""

    def __init__(self, method: str, seconds: float, me: Endpoint,
                 by_rank: Mapping[int, Endpoint], allgather: AllGather) -> None:
        self.method = method
        self.seconds = seconds
        self.me = me
        self.by_rank = by_rank
        self.allgather = allgather

    def run(self, pairs: Sequence[tuple[int, int]]) -> list[PairRate]:
        receiving = [(s, d) for s, d in pairs if d == self.me.rank]
        sending = [(s, d) for s, d in pairs if s == self.me.rank]
        server, error = self.listen() if receiving else (None, "")
        ports: dict[int, int | None] = {}
        errors: dict[int, str] = {}
        port = server.port if server is not None and not error else None
        for who, their_port, their_error in self.allgather((self.me.rank, port, error)):
            ports[who], errors[who] = their_port, their_error
        sent = [self.send(src, dst, ports.get(dst), errors.get(dst, ""))
                for src, dst in sending]
        return [pr for pr in sent if pr is not None] + self.received(server, receiving, error)

    def listen(self) -> tuple[Iperf3Server | TcpSink | None, str]:
        try:
            if self.method == "iperf3":
                server = Iperf3Server(self.me.address)
                server.started()
                return server, ""
            return TcpSink(self.me.address, self.seconds), ""
        except OSError as exc:
            return None, str(exc)

    def send(self, src: int, dst: int, port: int | None, error: str) -> PairRate | None:
        """The pair's rate (iperf3), its error, or None: a tcp sink reports its own rate."""
        if port is None:
            return PairRate(src, dst, None, error or f"no listener on rank {dst}")
        address = self.by_rank[dst].address
        try:
            if self.method == "iperf3":
                return PairRate(src, dst, iperf3_client(self.me.address, address, port,
                                                        self.seconds))
            tcp_source(self.me.address, address, port, self.seconds)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return PairRate(src, dst, None, str(exc))
        return None

    def received(self, server: Iperf3Server | TcpSink | None,
                 receiving: Sequence[tuple[int, int]], error: str) -> list[PairRate]:
        """The sink's rates (tcp); iperf3's sender reports, so its server only closes."""
        if isinstance(server, TcpSink):
            server.close(self.seconds + 30)
            return [PairRate(s, d, server.gbps, server.error) for s, d in receiving]
        if isinstance(server, Iperf3Server):
            server.close()
        return [PairRate(s, d, None, error) for s, d in receiving] if error else []
