"""Turn raw flag values into a :class:`TuneRequest`, refusing bad input with exit 2 and a hint."""

from __future__ import annotations

import ipaddress

from ddpnet.errors import ConfigError
from ddpnet.tune.model import IPInterface, IPNetwork


def parse_subnet(text: str) -> IPNetwork:
    text = text.strip()  # messages stay one line
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ConfigError(f"--cluster-subnet {text!r} is not a network",
                          "give a CIDR such as 198.18.0.0/24") from None
    if str(net) != text.strip():
        raise ConfigError(f"--cluster-subnet {text} has host bits set: it is not a network",
                          f"did you mean --cluster-subnet {net}?")
    if net.prefixlen == 0:
        raise ConfigError(f"--cluster-subnet {text} opens the training ports to everyone",
                          "give the cluster's own subnet, e.g. 10.0.0.0/24 (never 0.0.0.0/0)")
    return net


def parse_port(text: str | int, flag: str = "--master-port",
               example: str = "--master-port 29500") -> int:
    try:
        port = int(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {text!r} is not a number",
                          f"a TCP port 1-65535, e.g. {example}") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{flag} {port} is out of range", f"a TCP port 1-65535, e.g. {example}")
    return port


def parse_port_range(text: str) -> tuple[int, int]:
    lo_s, sep, hi_s = text.replace(":", "-").partition("-")
    if not sep:
        raise ConfigError(f"--port-range {text!r} is not LO-HI", "e.g. --port-range 50000-51000")
    example = "--port-range 50000-51000"
    lo, hi = parse_port(lo_s, "--port-range", example), parse_port(hi_s, "--port-range", example)
    if lo >= hi or lo < 1024:
        raise ConfigError(f"--port-range {lo}-{hi}: need 1024 <= LO < HI",
                          "e.g. --port-range 50000-51000")
    return lo, hi


def parse_static_ip(text: str, gateway: str | None) -> IPInterface:
    text = text.strip()  # messages stay one line
    try:
        iface = ipaddress.ip_interface(text)
    except ValueError:
        raise ConfigError(f"--static-ip {text!r} is not ADDRESS/PREFIX",
                          "e.g. --static-ip 10.0.0.11/24") from None
    if "/" not in text:
        raise ConfigError(f"--static-ip {text} has no prefix", f"e.g. --static-ip {text}/24")
    net = iface.network
    if net.num_addresses > 2 and iface.ip in (net.network_address, net.broadcast_address):
        which = "network" if iface.ip == net.network_address else "broadcast"
        raise ConfigError(f"--static-ip {text} is the {which} address of {net}, not a host in it",
                          f"pick a host address inside {net}")
    if gateway is not None:
        try:
            gw = ipaddress.ip_address(gateway)
        except ValueError:
            raise ConfigError(f"--gateway {gateway!r} is not an address",
                              "e.g. --gateway 10.0.0.1") from None
        if gw not in net:
            raise ConfigError(f"--gateway {gateway} is outside the static IP's prefix {net}",
                              f"use a gateway inside {net} or fix the prefix of --static-ip")
        if gw == iface.ip:
            raise ConfigError(f"--gateway {gateway} is the static address itself",
                              "give the router's address")
    return iface


def parse_dns(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    out = []
    for item in text.split(","):
        try:
            out.append(str(ipaddress.ip_address(item.strip())))
        except ValueError:
            raise ConfigError(f"--dns {item!r} is not an address",
                              "e.g. --dns 10.0.0.2,10.0.0.3") from None
    return tuple(out)
