"""Addresses as users write them (pure): the one parser for every place that takes a host
(MASTER_ADDR, ``--master-addr``, hostfile lines, ``tcp://`` URLs, ``host:port`` endpoints).

A user copies an address from ``ip addr``, a URL or a hostfile: IPv4 (``10.0.0.1``), IPv6
(``fd00::1``), bracketed IPv6 with a port (``[fd00::1]:29500``), link-local IPv6 with or
without its zone (``fe80::1%eth0``; ``%25`` in URLs, RFC 6874) or a host name. Each is parsed
here into a :class:`UserAddress` or refused with a one-line :class:`ConfigError` that says
what is wrong with the text and how to write it; whether it *works* on a node (a link-local
address without its zone) is judged where the interfaces are known (``net.zones``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ddpnet.errors import ConfigError

#: whether a port may (or must) follow the host
NO_PORT, OPTIONAL_PORT, REQUIRED_PORT = "no", "optional", "required"

#: a DNS label as resolvers accept it (underscores too: cluster names have them)
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
#: an interface name (IFNAMSIZ 16, no '/' or whitespace) or an interface index
_ZONE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
_LINK_LOCAL_V6 = ipaddress.IPv6Network("fe80::/10")


@dataclass(frozen=True)
class UserAddress:
    """One parsed address. ``host`` is the name or IP without brackets or zone; ``kind``
    ``ipv4``, ``ipv6`` or ``name``; ``zone`` the IPv6 scope given after ``%`` (an interface
    name or index), ``port`` the port given after the host, if any."""

    text: str
    host: str
    kind: str
    zone: str = ""
    port: int | None = None
    bracketed: bool = False

    @property
    def is_ip(self) -> bool:
        return self.kind != "name"

    @property
    def link_local(self) -> bool:
        """An IPv6 link-local address (fe80::/10): reachable only through one named
        interface, its zone."""
        return self.kind == "ipv6" and ipaddress.IPv6Address(self.host) in _LINK_LOCAL_V6

    @property
    def needs_zone(self) -> bool:
        """A link-local address given without its zone: the kernel refuses to bind or dial
        it (EINVAL), and TCPStore retries that until its timeout."""
        return self.link_local and not self.zone

    @property
    def dial(self) -> str:
        """What getaddrinfo, ``socket.connect`` and MASTER_ADDR take: the host with its zone
        (``fe80::1%eth0``), no brackets."""
        return f"{self.host}%{self.zone}" if self.zone else self.host

    def endpoint(self, port: int | None = None) -> str:
        """``host:port`` as a URL writes it (IPv6 in brackets)."""
        p = self.port if port is None else port
        host = f"[{self.dial}]" if self.kind == "ipv6" else self.host
        return host if p is None else f"{host}:{p}"


def _fail(text: str, source: str, why: str, hint: str) -> ConfigError:
    return ConfigError(f"{source} {text!r} {why}", hint)


_HINT = ("write an IPv4 address (10.0.0.1), an IPv6 address (fd00::1; a link-local one with "
         "its interface: fe80::1%eth0) or a host name (node01)")


def parse_address(text: str, source: str = "address", *, port: str = NO_PORT,
                  url: bool = False) -> UserAddress:
    """Parse one host as a user wrote it, or raise ConfigError naming ``source`` (pure).

    ``port``: :data:`NO_PORT` (MASTER_ADDR, a hostfile host), :data:`OPTIONAL_PORT` or
    :data:`REQUIRED_PORT` (``host:port`` endpoints, ``tcp://`` URLs). ``url``: the zone may be
    written ``%25eth0`` (RFC 6874)."""
    raw = str(text)
    stripped = raw.strip()
    if not stripped:
        raise _fail(raw, source, "is empty", _HINT)
    if any(c.isspace() or not c.isprintable() for c in stripped):
        raise _fail(raw, source, "contains whitespace or control characters", _HINT)
    if stripped != raw:  # torch would look the value up with its spaces
        raise _fail(raw, source, "has whitespace around it", f"write it without: {stripped}")
    if stripped.startswith("["):
        return _bracketed(raw, stripped, source, port, url)
    if stripped.count(":") >= 2:
        return _bare_v6(raw, stripped, source, port, url)
    host, sep, rest = stripped.partition(":")
    number = _port(raw, rest, source, port) if sep else None
    if number is None and port == REQUIRED_PORT:
        raise _fail(raw, source, "has no port", f"write HOST:PORT, e.g. {host}:29500 "
                    "(IPv6 as [fd00::1]:29500)")
    return _v4_or_name(raw, host, source, number)


def _port(raw: str, text: str, source: str, mode: str) -> int:
    if mode == NO_PORT:
        host = raw.strip().rpartition(":")[0].strip("[]")
        raise _fail(raw, source, "holds a port, but takes the host alone",
                    f"give the host alone ({host}) and the port on its own (MASTER_PORT="
                    f"{text or 29500}, --master-port {text or 29500})")
    if not re.fullmatch(r"\d{1,5}", text) or not 1 <= int(text) <= 65535:
        raise _fail(raw, source, f"has port {text!r}, not a number in 1..65535",
                    "write HOST:PORT with a port such as 29500")
    return int(text)


def _zone(raw: str, source: str, zone: str, url: bool) -> str:
    if url and zone.startswith("25"):
        zone = zone[2:]  # RFC 6874: "%" is written "%25" in a URL
    if not _ZONE.fullmatch(zone):
        raise _fail(raw, source, f"has zone {zone!r}, not an interface name or index",
                    "write the interface after %, as `ip -br addr` names it: fe80::1%eth0")
    return zone


def _v6(raw: str, body: str, source: str, url: bool, *, bracketed: bool,
        number: int | None) -> UserAddress:
    ip, pct, zone = body.partition("%")
    try:
        addr = ipaddress.IPv6Address(ip)
    except ValueError:
        raise _fail(raw, source, f"is not an IPv6 address ({ip!r})",
                    "write IPv6 as fd00::1 (with a port: [fd00::1]:29500)") from None
    scope = _zone(raw, source, zone, url) if pct else ""
    return UserAddress(raw, str(addr), "ipv6", scope, number, bracketed)


def _bracketed(raw: str, text: str, source: str, mode: str, url: bool) -> UserAddress:
    body, close, rest = text[1:].partition("]")
    if not close:
        raise _fail(raw, source, "opens a bracket it does not close",
                    "write bracketed IPv6 as [fd00::1]:29500")
    if rest and not rest.startswith(":"):
        raise _fail(raw, source, f"has {rest!r} after the bracket, not :PORT",
                    "write bracketed IPv6 as [fd00::1]:29500")
    number = _port(raw, rest[1:], source, mode) if rest else None
    if number is None and mode == NO_PORT:
        raise _fail(raw, source, "is in brackets, which only a URL or HOST:PORT uses",
                    f"give the address without brackets: {body}")
    if number is None and mode == REQUIRED_PORT:
        raise _fail(raw, source, "has no port", f"write [{body}]:29500")
    return _v6(raw, body, source, url, bracketed=True, number=number)


def _bare_v6(raw: str, text: str, source: str, mode: str, url: bool) -> UserAddress:
    try:
        found = _v6(raw, text, source, url, bracketed=False, number=None)
    except ConfigError:
        head, _, tail = text.rpartition(":")
        if tail.isdigit() and not head.endswith(":") and _is_v6(head):  # "fd00::1:29500"
            if mode == NO_PORT:
                raise _fail(raw, source, "holds a port, but takes the address alone",
                            f"give the address alone ({head}) and the port on its own "
                            f"(MASTER_PORT={tail}, --master-port {tail})") from None
            raise _fail(raw, source, "is IPv6 with a port, but not in brackets",
                        f"write [{head}]:{tail}") from None
        raise
    if mode == REQUIRED_PORT:
        head, _, tail = text.rpartition(":")
        guess = (f"[{head}]:{tail} if {tail} is the port, else "
                 if tail.isdigit() and _is_v6(head) else "")
        raise _fail(raw, source, "is an IPv6 address without a port (or with one, but not in "
                    "brackets: the last group reads as part of the address)",
                    f"write {guess}[{found.dial}]:29500")
    return found


def _is_v6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _v4_or_name(raw: str, host: str, source: str, number: int | None) -> UserAddress:
    if "%" in host:
        raise _fail(raw, source, "has a %zone, which only an IPv6 address takes", _HINT)
    if re.fullmatch(r"[\d.]+", host):
        try:
            return UserAddress(raw, str(ipaddress.IPv4Address(host)), "ipv4", port=number)
        except ValueError:
            raise _fail(raw, source, "is not an IPv4 address (four numbers 0-255)",
                        _HINT) from None
    name = host[:-1] if host.endswith(".") else host
    bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c in "-_."))), None)
    if bad is not None:
        raise _fail(raw, source, f"is not a host name or address ({bad!r} is not allowed "
                    "in a host name)", _HINT)
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise _fail(raw, source, "is not a host name (labels of 1-63 letters, digits, '-' "
                    "and '_', not starting or ending with '-', separated by single dots)",
                    _HINT)
    return UserAddress(raw, host, "name", port=number)


def ip_in(text: str) -> UserAddress | None:
    """The IP address ``text`` is, in any form a user writes one (``10.0.0.1``,
    ``fe80::1%eth0``, ``[fd00::1]:29500``), or None for a name or junk (pure): where an
    interface name is expected (``*_SOCKET_IFNAME``), an address is named for what it is."""
    try:
        found = parse_address(text, "value", port=OPTIONAL_PORT)
    except ConfigError:
        return None
    return found if found.is_ip else None
