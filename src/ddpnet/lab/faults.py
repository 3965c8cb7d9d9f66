"""Fault kinds, as pure data: validating a request and rendering, for one node, what its
faults mean (tc shaping, an nftables ruleset, an MTU, a hosts file flag, an extra interface).

A node's faults are a list of ``{"kind": ..., **options}``; applying them always rebuilds the
node's whole fault state from the list (so ``clear`` is "apply the empty list" and two faults
of different kinds combine). :mod:`ddpnet.lab.lab` does the applying.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ddpnet.errors import ConfigError
from ddpnet.lab.topology import (
    BRIDGE,
    DEFAULT_MASTER_PORT,
    LAB_RANGE,
    ROUTER_ROUTED,
    LabNode,
    Plan,
    Shaping,
    check_ifname,
    decoy_subnet,
    delay_ms,
    in_lab_range,
    loss_percent,
    rate_bits,
)

#: kind -> one-line description (CLI help and docs)
KINDS: dict[str, str] = {
    "block-port": "drop (or --reject) inbound TCP to --port",
    "block-ephemeral": "allow inbound TCP only to MASTER_PORT (--port) and 29400, drop (or "
                       "--reject) the rest",
    "link-down": "take the node's lab interface down (back up after --for S)",
    "rate": "limit the node's link to --rate (both directions)",
    "loss": "drop --percent of the packets the node sends",
    "delay": "add --ms of delay (each packet's varying by up to --jitter ms either way) to "
             "the packets the node sends",
    "mtu": "set the node's interface MTU to --mtu (the switch keeps the lab MTU)",
    "port-mtu": "set the MTU of the node's switch port to --mtu (the node keeps its own)",
    "hostname-loopback": "map the node's hostname to 127.0.1.1 in its /etc/hosts",
    "extra-iface": "add a second, non-routable interface named --iface (default docker0)",
    "hosts-entry": "map --host to --address in the node's /etc/hosts, instead of the lab's "
                   "line (a stale, loopback or IPv6 entry on that node only)",
    "vip": "connections from the node to --address are DNAT'd to node 0 (a service VIP, "
           "load balancer or port-forward in front of rank 0)",
    "twin-nic": "a second NIC (--iface, eth1) on the lab switch at --address in the lab "
                "subnet that wins the route, with rp_filter=1 and arp_ignore=1",
    "policy-route": "a policy rule sends everything from the node's address out another NIC "
                    "(wan0, leading nowhere): replies leave by the wrong interface",
    "no-route": "remove the node's static route to the routed subnet (a lab with --routed)",
    "address": "the node's lab interface takes --address (CIDR) instead of its own: "
               "another node's address makes a duplicate",
}
RENDEZVOUS_PORT = 29400
NFT_TABLE = "ddpnet_lab"
EXTRA_IFACE = "docker0"
#: the twin-nic fault's default name, and the policy-route fault's NIC and routing table
TWIN_IFACE = "eth1"
POLICY_IFACE = "wan0"
POLICY_TABLE = 100
#: nft rule that rejects with a TCP reset, so the peer sees ECONNREFUSED at once
_REJECT = "reject with tcp reset"


def _port(value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError, OverflowError):  # inf: found by the fuzzer
        port = -1
    if not 1 <= port <= 65535:
        raise ConfigError(f"bad port {value!r}: must be 1-65535", "for example --port 29500")
    return port


def _number(value: Any, convert: Any, what: str, hint: str) -> Any:
    """``convert(value)`` (float or int), or a ConfigError naming the option."""
    try:
        return convert(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"bad {what} {value!r}: not a number", hint) from None


#: kind -> the options it takes (CLI spelling with ``_`` for ``-``)
_OPTIONS: dict[str, set[str]] = {
    "block-port": {"port", "reject"}, "block-ephemeral": {"port", "reject"},
    "link-down": {"for_s"}, "rate": {"rate"}, "loss": {"percent"}, "delay": {"ms", "jitter_ms"},
    "mtu": {"mtu"}, "port-mtu": {"mtu"}, "hostname-loopback": set(),
    "extra-iface": {"iface", "address"},
    "hosts-entry": {"host", "address"}, "vip": {"address"},
    "twin-nic": {"iface", "address"}, "policy-route": set(), "no-route": set(),
    "address": {"address"},
}


def normalize(kind: str, opts: Mapping[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """A validated fault record; ConfigError naming the kind and option otherwise."""
    o = {k.replace("-", "_"): v for k, v in opts.items() if v is not None}
    if kind not in KINDS:
        raise ConfigError(f"unknown fault kind {kind!r}",
                          "kinds: " + ", ".join(KINDS) + " (or clear)")
    allowed = _OPTIONS[kind]
    unknown = sorted(set(o) - allowed)
    if unknown:
        raise ConfigError(f"fault {kind} takes no option {unknown[0]!r}",
                          f"options of {kind}: {', '.join(sorted(allowed)) or 'none'}")
    return {"kind": kind, **_RECORDS[kind](o, now)}


def _need(o: Mapping[str, Any], option: str, kind: str, what: str, example: str) -> Any:
    if option not in o:
        raise ConfigError(f"fault {kind} needs {what}", f"for example {example}")
    return o[option]


def _block_port(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    port = _need(o, "port", "block-port", "a port", "--port 29500")
    return {"port": _port(port), "reject": bool(o.get("reject", False))}


def _block_ephemeral(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    return {"port": _port(o.get("port", DEFAULT_MASTER_PORT)),
            **({"reject": True} if o.get("reject") else {})}


def _lab_cidr(o: Mapping[str, Any], kind: str) -> str:
    """An IPv4 ``ADDRESS/PREFIX`` inside 198.18.0.0/15 (``--address``)."""
    text = str(_need(o, "address", kind, "an address", "--address 198.18.0.202/24"))
    try:
        cidr = ipaddress.IPv4Interface(text)
    except ValueError:
        raise ConfigError(f"fault {kind}: bad address {text!r}: an IPv4 ADDRESS/PREFIX",
                          "for example --address 198.18.0.202/24") from None
    if cidr.ip not in LAB_RANGE or "/" not in text:
        raise ConfigError(f"fault {kind}: address {text} is not ADDRESS/PREFIX inside "
                          "198.18.0.0/15", "for example --address 198.18.0.202/24")
    return cidr.with_prefixlen


def _twin_nic(o: Mapping[str, Any]) -> dict[str, Any]:
    return {"iface": check_ifname(str(o.get("iface", TWIN_IFACE)), "--iface eth1"),
            "address": _lab_cidr(o, "twin-nic")}


def _link_down(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    if o.get("for_s") is None:
        return {}
    for_s = _number(o["for_s"], float, "duration", "e.g. --for 5")
    if not 0 < for_s < float("inf"):  # nan fails too
        raise ConfigError(f"bad duration {for_s:g}: must be positive", "e.g. --for 5")
    return {"for_s": for_s, "until": (time.time() if now is None else now) + for_s}


def _rate(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    rate = _need(o, "rate", "rate", "a rate", "--rate 100mbit")
    rate_bits(str(rate))
    return {"rate": str(rate)}


def _loss(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    return {"percent": loss_percent(_need(o, "percent", "loss", "a percentage", "--percent 5"))}


def _delay(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    rec = {"ms": delay_ms(_need(o, "ms", "delay", "a delay", "--ms 20"))}
    if o.get("jitter_ms"):
        rec["jitter_ms"] = delay_ms(o["jitter_ms"])
    return rec


def _mtu(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    mtu = _number(o.get("mtu", 0), int, "MTU", "e.g. --mtu 9000")
    if not 68 <= mtu <= 65535:
        raise ConfigError(f"bad MTU {o.get('mtu')!r}: must be 68-65535", "e.g. --mtu 9000")
    return {"mtu": mtu}


def _extra_iface(o: Mapping[str, Any], now: float | None) -> dict[str, Any]:
    rec = {"iface": check_ifname(str(o.get("iface", EXTRA_IFACE)), "--iface docker0")}
    if "address" in o:
        rec["address"] = str(o["address"])
    return rec


def _hosts_entry(o: Mapping[str, Any]) -> dict[str, str]:
    """A hosts line's name and address: loopback or inside the lab range only."""
    host, address = str(o.get("host", "")), str(o.get("address", ""))
    if not host or any(c.isspace() for c in host) or host.startswith("#"):
        raise ConfigError(f"fault hosts-entry needs a host name, got {host!r}",
                          "for example --host lab-n0 --address 127.0.1.1")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ConfigError(f"fault hosts-entry: bad address {address!r}",
                          "for example --address 127.0.1.1") from None
    if not (ip.is_loopback or in_lab_range(ip)):
        raise ConfigError(f"address {address} is neither loopback nor in 198.18.0.0/15 or "
                          "2001:2::/48", "lab addresses stay inside 198.18.0.0/15 or "
                          "2001:2::/48 (or loopback)")
    return {"host": host, "address": str(ip)}


def _vip(o: Mapping[str, Any]) -> dict[str, str]:
    """An IPv4 address inside the lab range (routable on the lab subnet, so the kernel finds
    a route before the DNAT rewrites it)."""
    address = str(_need(o, "address", "vip", "an address", "--address 198.18.0.250"))
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        raise ConfigError(f"fault vip: bad address {address!r}: an IPv4 address",
                          "for example --address 198.18.0.250") from None
    if ip not in LAB_RANGE:
        raise ConfigError(f"address {address} is outside 198.18.0.0/15",
                          "pick an unused address of the lab subnet, e.g. 198.18.0.250")
    return {"address": str(ip)}


#: kind -> its options checked and turned into the record's fields
_RECORDS: dict[str, Callable[[Mapping[str, Any], float | None], dict[str, Any]]] = {
    "block-port": _block_port, "block-ephemeral": _block_ephemeral, "link-down": _link_down,
    "rate": _rate, "loss": _loss, "delay": _delay, "mtu": _mtu, "port-mtu": _mtu,
    "hostname-loopback": lambda o, now: {}, "extra-iface": _extra_iface,
    "hosts-entry": lambda o, now: _hosts_entry(o), "vip": lambda o, now: _vip(o),
    "twin-nic": lambda o, now: _twin_nic(o), "policy-route": lambda o, now: {},
    "no-route": lambda o, now: {}, "address": lambda o, now: {"address": _lab_cidr(o, "address")},
}


def active(faults: Sequence[Mapping[str, Any]], now: float | None = None) -> list[dict[str, Any]]:
    """Faults still in effect (a ``link-down --for S`` ends by itself)."""
    t = time.time() if now is None else now
    return [dict(f) for f in faults
            if not (f["kind"] == "link-down" and f.get("until", t + 1) <= t)]


def add(faults: Sequence[Mapping[str, Any]], rec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The list with ``rec`` added; a fault of a kind that holds one value (rate, mtu, ...)
    replaces the previous one of that kind, block-port accumulates one per port."""
    out = []
    for f in active(faults):
        same_kind = f["kind"] == rec["kind"]
        key = {"block-port": "port", "hosts-entry": "host"}.get(str(rec["kind"]))
        if same_kind and (key is None or f[key] == rec[key]):
            continue
        out.append(f)
    out.append(dict(rec))
    return out


@dataclass(frozen=True)
class NodeFaults:
    """What a node's faults add up to (pure: the applier turns it into commands)."""

    shaping: Shaping
    mtu: int
    link_up: bool
    hostname_loopback: bool
    nft: str | None
    extra_iface: tuple[str, str] | None  # (name, cidr)
    #: (address, host) lines put first in the node's /etc/hosts
    hosts_entries: tuple[tuple[str, str], ...] = ()
    #: the MTU of the node's switch port (the lab's MTU unless a port-mtu fault says)
    port_mtu: int | None = None
    #: routing faults: a second NIC in the lab subnet (name, cidr), a policy rule out of a
    #: decoy NIC (its cidr), the routed subnet's route removed, the lab address replaced
    twin: tuple[str, str] | None = None
    policy: str | None = None
    no_route: bool = False
    address: str | None = None


def extra_iface_cidr(p: Plan, index: int) -> str:
    """A /24 for the decoy interface that does not overlap the lab subnet (so it never
    routes to the master): 198.19.254.0/24, or 198.18.254.0/24 when the lab uses that (a
    second network is kept clear of it, see :func:`ddpnet.lab.topology.plan_second`)."""
    net = decoy_subnet(ipaddress.IPv4Network(p.spec.subnet, strict=False))
    if net is None:
        raise ConfigError("no free /24 for the extra interface inside 198.18.0.0/15",
                          "use a smaller lab subnet")
    return f"{net.network_address + 1 + index}/24"


def nft_ruleset(faults: Sequence[Mapping[str, Any]], *, ifname: str = "eth0",
                loss_pct: float | None = None,
                dnat: Sequence[tuple[str, str]] = ()) -> str | None:
    """The node's ``inet ddpnet_lab`` table, or None for no table: an input chain for its
    firewall faults and an output chain that drops ``loss_pct`` % of what leaves ``ifname``
    (random loss in nftables, so it works on kernels without sch_netem)."""
    rules: list[str] = []
    for f in faults:
        if f["kind"] == "block-port":
            rules.append(f"tcp dport {f['port']} {_REJECT if f['reject'] else 'drop'}")
    strict = [f for f in faults if f["kind"] == "block-ephemeral"]
    if strict:
        ports = sorted({int(f["port"]) for f in strict} | {RENDEZVOUS_PORT})
        rules += [
            "ct state established,related accept",
            "meta l4proto { icmp, ipv6-icmp } accept",
            f"tcp dport {{ {', '.join(map(str, ports))} }} accept",
            _REJECT if any(f.get("reject") for f in strict) else "drop",
        ]
    chains = []
    if rules:
        body = "\n".join(f"    {r}" for r in ['iif "lo" accept', *rules])
        chains.append("  chain input {\n    type filter hook input priority 0; policy accept;\n"
                      f"{body}\n  }}\n")
    if loss_pct:
        per_10k = max(1, round(loss_pct * 100))
        chains.append("  chain output {\n    type filter hook output priority 0; policy accept;\n"
                      f'    oifname "{ifname}" numgen random mod 10000 < {per_10k} drop\n  }}\n')
    if dnat:
        body = "\n".join(f"    ip daddr {vip} dnat ip to {to}" for vip, to in dnat)
        chains.append("  chain output_nat {\n    type nat hook output priority -100; "
                      f"policy accept;\n{body}\n  }}\n")
    if not chains:
        return None
    return f"table inet {NFT_TABLE} {{\n" + "".join(chains) + "}\n"


def combine(p: Plan, index: int, faults: Sequence[Mapping[str, Any]],
            now: float | None = None) -> NodeFaults:
    """The node's shaping, MTU, link state, hosts lines, ruleset and decoy from its faults."""
    fs = active(faults, now)
    shaping = p.spec.shaping
    mtu = p.spec.mtu
    link_up, loopback, extra = True, False, None
    port_mtu = next((int(f["mtu"]) for f in fs if f["kind"] == "port-mtu"), None)
    for f in fs:
        kind = f["kind"]
        if kind == "rate":
            shaping = replace(shaping, rate=f["rate"])
        elif kind == "loss":
            shaping = replace(shaping, loss_pct=f["percent"])
        elif kind == "delay":
            shaping = replace(shaping, delay_ms=f["ms"], jitter_ms=f.get("jitter_ms"))
        elif kind == "mtu":
            mtu = f["mtu"]
        elif kind == "link-down":
            link_up = False
        elif kind == "hostname-loopback":
            loopback = True
        elif kind == "extra-iface":
            cidr = f.get("address") or extra_iface_cidr(p, index)
            if ipaddress.ip_interface(cidr).ip not in LAB_RANGE:
                raise ConfigError(f"address {cidr} is outside 198.18.0.0/15",
                                  "lab addresses stay inside 198.18.0.0/15")
            extra = (f["iface"], cidr)
    return NodeFaults(shaping=shaping, mtu=mtu, link_up=link_up, hostname_loopback=loopback,
                      nft=nft_ruleset(fs, ifname=p.spec.ifname, loss_pct=shaping.loss_pct,
                                      dnat=[(f["address"], p.nodes[0].address) for f in fs
                                            if f["kind"] == "vip"]),
                      extra_iface=extra,
                      hosts_entries=tuple((f["address"], f["host"]) for f in fs
                                          if f["kind"] == "hosts-entry"),
                      port_mtu=port_mtu,
                      twin=next(((f["iface"], f["address"]) for f in fs
                                 if f["kind"] == "twin-nic"), None),
                      policy=extra_iface_cidr(p, index)
                      if any(f["kind"] == "policy-route" for f in fs) else None,
                      no_route=any(f["kind"] == "no-route" for f in fs),
                      address=next((f["address"] for f in fs if f["kind"] == "address"), None))


#: the policy-route fault's rule priority (before main's 32766)
POLICY_PRIO = 100


@dataclass(frozen=True)
class RoutingLines:
    """``ip -batch`` lines that rebuild a node's addressing and routes from its faults:
    ``undo`` (forced: what may not be there) in the switch and the node, then ``node`` and
    ``switch``; ``sysctl`` the node's ``net.ipv4.conf.all`` settings."""

    undo_switch: tuple[str, ...]
    undo_node: tuple[str, ...]
    node: tuple[str, ...]
    switch: tuple[str, ...]
    sysctl: tuple[str, ...]


def routing_lines(p: Plan, n: LabNode, nf: NodeFaults,
                  extra_addresses: Sequence[str] = ()) -> RoutingLines:
    """The node's lab address (or the ``address`` fault's), its extra addresses and routes,
    and the twin-nic, policy-route and no-route faults, from scratch each time (pure)."""
    cidr = nf.address or n.cidr
    addr, subnet = str(ipaddress.ip_interface(cidr).ip), str(ipaddress.ip_interface(cidr).network)
    # up first when it is to be up: a route through a link that is still down is refused
    node = [f"addr add {cidr} dev {n.ifname}", *([f"link set {n.ifname} up"] if nf.link_up
                                                 else [])]
    node += [f"addr replace {a} dev {n.ifname}" + (" nodad" if ":" in a else "")
             for a in extra_addresses if a != cidr]
    rt = p.router if nf.link_up else None  # a link that is down takes no route
    if rt is not None and p.inner(n):
        node.append(f"route add default via {rt.inner} dev {n.ifname} onlink")
    elif rt is not None and rt.mode == ROUTER_ROUTED and not nf.no_route:
        node.append(f"route add {rt.subnet} via {rt.outer} dev {n.ifname} onlink")
    switch: list[str] = []
    if nf.twin:
        name, twin = nf.twin
        node += [f"link add {name} mtu {nf.mtu} type veth peer name t{n.index} mtu {nf.mtu} "
                 f"netns {p.switch}", f"addr add {twin} dev {name}", f"link set {name} up",
                 f"route del {subnet} dev {n.ifname}",
                 f"route add {subnet} dev {n.ifname} proto kernel scope link src {addr} "
                 "metric 200"]
        switch += [f"link set t{n.index} master {BRIDGE}", f"link set t{n.index} up"]
    if nf.policy:
        gateway = ipaddress.ip_interface(nf.policy).network.broadcast_address - 1
        node += [f"link add {POLICY_IFACE} type veth peer name w{n.index} netns {p.switch}",
                 f"addr add {nf.policy} dev {POLICY_IFACE}", f"link set {POLICY_IFACE} up",
                 f"route add default via {gateway} dev {POLICY_IFACE} onlink table "
                 f"{POLICY_TABLE}",
                 f"rule add from {addr} lookup {POLICY_TABLE} prio {POLICY_PRIO}"]
        switch.append(f"link set w{n.index} up")
    on = 1 if nf.twin else 0
    return RoutingLines(
        undo_switch=(f"link del t{n.index}", f"link del w{n.index}"),
        undo_node=(f"rule del prio {POLICY_PRIO}", f"route flush table {POLICY_TABLE}",
                   f"addr flush dev {n.ifname} scope global"),
        node=tuple(node), switch=tuple(switch),
        sysctl=(f"net.ipv4.conf.all.rp_filter={on}", f"net.ipv4.conf.all.arp_ignore={on}"))


def describe(f: Mapping[str, Any]) -> str:
    """One short human word group per fault (``lab status``): ``block-port 29500 reject``."""
    parts = [str(f["kind"])]
    for key, value in f.items():
        if key in ("kind", "until") or value is False:
            continue
        parts.append(key if value is True else f"{key}={value:g}" if isinstance(value, float)
                     else str(value) if key in ("port", "rate", "iface") else f"{key}={value}")
    return " ".join(parts)
