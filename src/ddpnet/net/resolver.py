"""The node's resolver as part of the network: how long the name lookups a job makes take
through this node's own configuration (nsswitch: /etc/hosts, then the nameservers of
/etc/resolv.conf), and what a slow or dead nameserver costs the job's init.

torch's TCPStore does a reverse lookup (getnameinfo) of each peer it accepts or connects to,
only to log its name ("The hostname of the client socket cannot be retrieved. err=-3" when
it fails); a peer missing from /etc/hosts goes to the nameservers, and a nameserver that does
not answer costs ``timeout x attempts`` seconds per lookup (glibc's 5 s x 2: init takes 10 s
instead of under one). A forward lookup that gets no answer at all (this node's hostname,
which gloo binds; a MASTER_ADDR name) breaks the job instead.

:func:`parse_resolv_conf` and :func:`judge_lookups` are pure; :func:`time_lookups` is the
edge (bounded: a lookup still running at ``bound`` seconds is reported as no answer).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: glibc's defaults (resolv.conf(5)): 5 s per try, 2 tries
DEFAULT_TIMEOUT_S, DEFAULT_ATTEMPTS = 5.0, 2
#: a lookup at least this slow is named (a working resolver answers in milliseconds)
SLOW_S = 1.0
#: how long one timed lookup may run before it counts as unanswered
BOUND_S = 3.0
RESOLV_CONF = "/etc/resolv.conf"


@dataclass(frozen=True)
class ResolvConf:
    """What /etc/resolv.conf says about the nameservers (``source``: the file)."""

    nameservers: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    attempts: int = DEFAULT_ATTEMPTS
    source: str = RESOLV_CONF

    @property
    def failure_s(self) -> float:
        """What one lookup costs when no nameserver answers: each try waits ``timeout`` on
        every server (glibc), a nameserver-less file asks 127.0.0.1 (refused at once)."""
        return self.timeout_s * self.attempts * max(1, len(self.nameservers))

    def describe(self) -> str:
        servers = ", ".join(self.nameservers) or "none (127.0.0.1)"
        return (f"nameserver {servers} in {self.source} (timeout {self.timeout_s:g} s, "
                f"attempts {self.attempts})")

    def to_dict(self) -> dict[str, Any]:
        return {"nameservers": list(self.nameservers), "timeout_s": self.timeout_s,
                "attempts": self.attempts, "failure_s": self.failure_s}


def parse_resolv_conf(text: str, source: str = RESOLV_CONF) -> ResolvConf:
    """Nameservers and ``options timeout:N attempts:N`` (pure; glibc caps them at 30 and 5;
    glibc uses the first three nameservers)."""
    servers: list[str] = []
    timeout, attempts = DEFAULT_TIMEOUT_S, DEFAULT_ATTEMPTS
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split(";", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver" and len(servers) < 3:
            servers.append(fields[1])
        elif fields and fields[0] == "options":
            for opt in fields[1:]:
                key, _, value = opt.partition(":")
                if key == "timeout" and value.isdigit():
                    timeout = float(min(int(value), 30))
                elif key == "attempts" and value.isdigit():
                    attempts = max(1, min(int(value), 5))
    return ResolvConf(tuple(servers), timeout, attempts, source)


def read_resolv_conf(path: str = RESOLV_CONF) -> ResolvConf:
    """This node's resolver configuration (edge; the defaults when unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_resolv_conf(f.read(1 << 16), path)
    except OSError:
        return ResolvConf(source=path)


@dataclass(frozen=True)
class Lookup:
    """One timed lookup: ``forward`` (a name to addresses) or ``reverse`` (an address to a
    name), how long it took, and what came back. ``answered``: a reply came (a name or
    addresses, or a definite "no such name"); unanswered lookups ran out of ``bound``."""

    kind: str
    query: str
    seconds: float
    answer: str = ""
    error: str = ""
    answered: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "query": self.query, "seconds": round(self.seconds, 3),
                "answer": self.answer, "error": self.error, "answered": self.answered}

    @classmethod
    def from_dict(cls, raw: Any) -> Lookup | None:
        try:
            return cls(str(raw["kind"]), str(raw["query"]), float(raw["seconds"]),
                       str(raw.get("answer", "")), str(raw.get("error", "")),
                       bool(raw.get("answered", True)))
        except (KeyError, TypeError, ValueError):
            return None

    def shown(self) -> str:
        what = (self.answer or self.error or "no name") if self.answered else \
            "no answer"
        took = f"{self.seconds:.1f} s" if self.answered else f"over {self.seconds:.1f} s"
        return f"{self.kind} lookup of {self.query} took {took} ({what})"


def _forward(name: str) -> tuple[str, str]:
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        return ", ".join(dict.fromkeys(str(i[4][0]) for i in infos)), ""
    except (socket.gaierror, UnicodeError) as exc:
        return "", str(exc)


def _reverse(address: str) -> tuple[str, str]:
    try:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sockaddr: tuple[Any, ...] = (address, 0, 0, 0) if family == socket.AF_INET6 else \
            (address, 0)
        return socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)[0], ""
    except (socket.gaierror, OSError, UnicodeError) as exc:
        return "", str(exc)


def time_lookups(forward: Sequence[str] = (), reverse: Sequence[str] = (),
                 bound: float = BOUND_S) -> tuple[Lookup, ...]:
    """Time each lookup through this node's resolver, all at once (edge, at most ``bound``
    seconds; a lookup still running then is reported unanswered, its thread left behind)."""
    jobs = [("forward", q, _forward) for q in dict.fromkeys(forward) if q] + \
           [("reverse", q, _reverse) for q in dict.fromkeys(reverse) if q]
    results: dict[int, tuple[float, str, str]] = {}
    threads = []
    start = time.monotonic()
    for i, (_, query, fn) in enumerate(jobs):
        def work(i: int = i, query: str = query, fn: Any = fn) -> None:
            t = time.monotonic()
            answer, error = fn(query)
            results[i] = (time.monotonic() - t, answer, error)

        thread = threading.Thread(target=work, name="ddpnet-lookup", daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(max(0.0, bound - (time.monotonic() - start)))
    out = []
    for i, (kind, query, _) in enumerate(jobs):
        got = results.get(i)
        out.append(Lookup(kind, query, got[0], got[1], got[2]) if got is not None else
                   Lookup(kind, query, bound, answered=False))
    return tuple(out)


@dataclass(frozen=True)
class ResolverFinding:
    """A slow or dead resolver on one node: the lookups it slowed, what each costs the
    job's init, and whether it breaks the job (``fail``) or only slows it (``warn``)."""

    slow: tuple[Lookup, ...]
    conf: ResolvConf
    severity: str
    #: seconds one such lookup costs (measured, or resolv.conf's worst case when none came)
    per_lookup_s: float

    def why(self) -> str:
        dead = not any(lk.answered for lk in self.slow)
        state = "does not answer" if dead else "answers slowly"
        breaks = [lk for lk in self.slow if lk.kind == "forward" and not lk.answered]
        effect = (f"the forward lookup of {', '.join(lk.query for lk in breaks)} gets no "
                  "answer, so the job cannot resolve it (gloo binds this node's hostname's "
                  "address; ranks resolve MASTER_ADDR)" if breaks else
                  f"torch's store does a reverse lookup of each peer it connects to "
                  f"(\"The hostname of the client socket cannot be retrieved. err=-3\"), "
                  f"about {self.per_lookup_s:.0f} s each added to init")
        return (f"the resolver {state}: {'; '.join(lk.shown() for lk in self.slow)}; "
                f"{self.conf.describe()}, so a lookup /etc/hosts does not answer costs up "
                f"to {self.conf.failure_s:g} s: {effect}")

    def fix(self, peers: Sequence[tuple[str, str]] = ()) -> str:
        lines = "; ".join(f"'{a} {n}'" for a, n in peers if a and n)
        hosts = (f"add the job's nodes to /etc/hosts there ({lines})" if lines else
                 "add every node of the job (address and name) to /etc/hosts there")
        return (f"{hosts}, so no lookup leaves the node; or point /etc/resolv.conf at a "
                f"nameserver that answers (`getent hosts <address>` should return at once)")

    def evidence(self) -> tuple[str, ...]:
        return (*(lk.shown() for lk in self.slow), self.conf.describe())


def judge_lookups(lookups: Sequence[Lookup], conf: ResolvConf, slow_s: float = SLOW_S
                  ) -> ResolverFinding | None:
    """Whether this node's resolver slows or breaks the job (pure): the lookups at least
    ``slow_s`` slow or unanswered; a forward one unanswered fails, the rest warn."""
    slow = tuple(lk for lk in lookups if not lk.answered or lk.seconds >= slow_s)
    if not slow:
        return None
    severity = "fail" if any(lk.kind == "forward" and not lk.answered for lk in slow) \
        else "warn"
    measured = [lk.seconds for lk in slow if lk.answered]
    per = max(measured) if measured else conf.failure_s
    return ResolverFinding(slow, conf, severity, per)
