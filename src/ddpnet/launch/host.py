"""What ``ddpnet launch`` reads from this host (edge): its names and addresses, what
MASTER_ADDR resolves to, and the device names in /dev (to count GPUs without torch)."""

from __future__ import annotations

import concurrent.futures
import os
import socket


def local_names() -> frozenset[str]:
    """This host's names and addresses."""
    names = {socket.gethostname(), socket.getfqdn(), "localhost"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            names.update(a.address.split("%")[0] for a in addrs
                         if a.family in (socket.AF_INET, socket.AF_INET6))
    except Exception:  # pragma: no cover - psutil missing or /proc unreadable
        pass
    return frozenset(names)


def resolve_addresses(host: str, timeout: float = 2.0) -> frozenset[str]:
    """MASTER_ADDR's addresses, bounded in time (a dead resolver must not hold the launch)."""

    def lookup() -> frozenset[str]:
        return frozenset(str(i[4][0]) for i in socket.getaddrinfo(host, None))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(lookup).result(timeout=timeout)
    except Exception:
        return frozenset()
    finally:
        pool.shutdown(wait=False)


def dev_entries() -> list[str]:
    """The names in /dev (``nvidia0``... count the GPUs)."""
    try:
        return os.listdir("/dev")
    except OSError:  # pragma: no cover
        return []
