"""Choosing a rendezvous port that the kernel will not hand out to someone else."""

from __future__ import annotations

import zlib
from pathlib import Path

#: Linux's default net.ipv4.ip_local_port_range
DEFAULT_EPHEMERAL = (32768, 60999)
#: torch's conventional MASTER_PORT and torchrun's c10d port
TORCH_DEFAULT_PORT = 29500
C10D_PORT = 29400
#: lowest port we derive; below it live well-known services
_DERIVE_FLOOR = 15000


def parse_port_range(text: str) -> tuple[int, int]:
    """``"32768\\t60999"`` -> (32768, 60999); the default on malformed input."""
    parts = text.split()
    try:
        low, high = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return DEFAULT_EPHEMERAL
    if not 1 <= low <= high <= 65535:
        return DEFAULT_EPHEMERAL
    return low, high


def read_port_range(proc: Path = Path("/proc")) -> tuple[int, int]:
    """The kernel's ephemeral port range (edge: reads /proc)."""
    try:
        return parse_port_range((proc / "sys/net/ipv4/ip_local_port_range").read_text())
    except OSError:
        return DEFAULT_EPHEMERAL


def derive_port(job_id: str, port_range: tuple[int, int] = DEFAULT_EPHEMERAL) -> int:
    """A port from a job id, deterministic on every node of the job, outside the ephemeral
    range (so no outgoing socket holds it) and spread over the widest free window.

    Numeric ids use ``id mod window`` so consecutive jobs never collide (unlike "the last
    four digits"); other ids are hashed.
    """
    low, high = port_range
    below = (_DERIVE_FLOOR, low - 1) if low - 1 >= _DERIVE_FLOOR else None
    above = (high + 1, 65535) if high < 65535 else None
    windows = [w for w in (below, above) if w is not None and w[1] >= w[0]]
    if not windows:  # the whole range is ephemeral: fall back below the floor
        windows = [(1024, max(1024, low - 1))]
    start, end = max(windows, key=lambda w: w[1] - w[0])
    size = end - start + 1
    # isdigit() is true for "²" and int() refuses 4300+ digits: such ids are hashed too
    numeric = job_id.isascii() and job_id.isdigit() and len(job_id) < 4300
    key = int(job_id) if numeric else zlib.crc32(job_id.encode("utf-8", "surrogatepass"))
    port = start + key % size
    # keep away from torch's conventional ports so a stray default does not collide
    if port in (TORCH_DEFAULT_PORT, C10D_PORT):
        port = start + (key + 1) % size
    return port
