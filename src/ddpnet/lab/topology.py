"""The shape of a lab and everything derived from it, as pure data: names, addresses, the
hosts file, the ``ip -batch`` lines that build it and the ``tc`` lines that shape it.

Nothing here touches the system; :mod:`ddpnet.lab.system` runs what this module plans, so the
plan is unit-tested without root.

Layout of a lab named ``L`` with N nodes (every name derives from ``L``, so labs coexist and a
half-built lab can be found and removed from its name alone):

- network namespace ``L-sw`` holds the bridge ``br0`` and one port ``p<i>`` per node;
- network namespace ``L-n<i>`` is node i: loopback, and one veth (the lab interface, ``eth0``
  by default) whose peer is ``p<i>``; address = the (i+1)-th host of the subnet;
- with a second network (``second_net``), the switch namespace also holds ``br2`` with one
  port ``s<i>`` per node, and node i has a second veth (``eth1`` by default) at host i+1 of
  that subnet: the fast network beside a management one. On ``second_first`` nodes it is
  created first, so it has the lower ifindex and comes first in ``getifaddrs()`` order;
- ``/etc/netns/L-n<i>/hosts`` (bind-mounted by ``ip netns exec``) maps every hostname
  ``L-n<j>`` to its lab address; the hostname is set in a per-process UTS namespace.

The host's own network namespace is never changed. What grows with N: one namespace, one veth
pair and one hosts line per node (so the hosts file is O(N) per node, O(N^2) in all; fine to a
few thousand nodes, the /24 default caps a lab at 254 nodes, a /16 at 65534).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ddpnet.errors import ConfigError

#: the benchmarking range (RFC 2544); labs never use any other address
LAB_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
#: its IPv6 twin (RFC 5180), for extra addresses and hosts entries only
LAB_RANGE6 = ipaddress.IPv6Network("2001:2::/48")


def in_lab_range(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Inside 198.18.0.0/15 or 2001:2::/48, the benchmarking ranges labs may use."""
    return ip in LAB_RANGE if ip.version == 4 else ip in LAB_RANGE6
DEFAULT_SUBNET = "198.18.0.0/24"
DEFAULT_NAME = "lab"
DEFAULT_IFNAME = "eth0"
DEFAULT_SECOND_IFNAME = "eth1"
DEFAULT_MASTER_PORT = 29500
SWITCH_SUFFIX = "-sw"
ROUTER_SUFFIX = "-rt"
ROUTER_NAT, ROUTER_ROUTED = "nat", "routed"
#: the inner bridge (in the switch namespace) of a lab with nodes behind its router
INNER_BRIDGE = "br1"
#: the most nodes one lab builds (namespaces, veths and an O(N^2) hosts total)
MAX_NODES = 4096
BRIDGE = "br0"
#: the bridge of the second network (``--second-net``), in the switch namespace
SECOND_BRIDGE = "br2"

_NAME_RE = re.compile(r"^[a-z](?:[a-z0-9-]{0,22}[a-z0-9])?$")
_IFNAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")
#: tc rate: a number and a unit tc understands (bit/kbit/mbit/gbit/tbit, or bps variants)
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$",
                      re.IGNORECASE)
#: the fastest rate a lab link takes (tbf's burst, 4 ms of it, stays well inside tc's u32)
MAX_RATE_BITS = 1e12
_RATE_FACTORS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
                 "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
_DELAY_RE = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)?$")


def rate_bits(rate: str) -> float:
    """``"200mbit"`` -> 2e8 bits per second; ConfigError with the accepted forms otherwise."""
    m = _RATE_RE.match(rate.strip())
    if not m:
        raise ConfigError(f"bad rate {rate!r}: expected a number and a unit, such as 200mbit",
                          "use tc's bit units: kbit, mbit, gbit, tbit (bits per second)")
    unit = m.group(2).lower()
    value = float(m.group(1)) * _RATE_FACTORS[unit]
    if unit.endswith("bps"):  # tc's bytes: "1gbps" shaped 8 Gbit/s where 1 Gbit/s was meant
        bits = f"{m.group(1)}{unit[:-3] or ''}bit"
        raise ConfigError(f"bad rate {rate!r}: tc reads {unit} as bytes per second, so this "
                          f"would shape {value / 1e9:g} Gbit/s",
                          f"give bits per second: {bits} (a NIC's Gbit/s), or "
                          f"{float(m.group(1)) * 8:g}{unit[:-3]}bit for {rate} of bytes")
    if not 0 < value <= MAX_RATE_BITS:
        raise ConfigError(f"bad rate {rate!r}: must be above 0 and at most 1tbit",
                          "for example --rate 1gbit")
    return value


def check_ifname(name: str, example: str) -> str:
    """A Linux interface name we may create (not lo nor the lab bridge), or ConfigError."""
    if not _IFNAME_RE.match(name) or name in ("lo", BRIDGE):
        raise ConfigError(f"bad interface name {name!r}: 1-15 letters, digits, _ . -",
                          f"for example {example}")
    return name


def delay_ms(delay: str | float) -> float:
    """``"0.1ms"``, ``"100us"``, ``0.5`` (ms) -> milliseconds."""
    if isinstance(delay, (int, float)):
        value = float(delay)
    else:
        m = _DELAY_RE.match(delay.strip())
        if not m:
            raise ConfigError(f"bad delay {delay!r}: expected a number with us, ms or s",
                              "for example --delay 0.1ms")
        value = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, None: 1.0}[m.group(2)]
    if not 0 <= value < float("inf"):  # nan fails too
        raise ConfigError(f"bad delay {delay!r}: must be a number >= 0", "for example 0.1ms")
    return value


def loss_percent(loss: str | float) -> float:
    """``"1%"``, ``"1"``, ``1.0`` -> 1.0 (percent)."""
    try:
        value = float(str(loss).strip().rstrip("%"))
    except ValueError:
        raise ConfigError(f"bad loss {loss!r}: expected a percentage",
                          "for example --loss 1 (1%)") from None
    if not 0 <= value <= 100:
        raise ConfigError(f"bad loss {loss!r}: must be between 0 and 100", "for example 0.5")
    return value


@dataclass(frozen=True)
class Shaping:
    """What ``tc`` does on one node's link: ``rate`` limits both directions, ``delay_ms`` and
    ``loss_pct`` apply to what the node sends (so a ping between two shaped nodes sees a
    round trip of twice the delay)."""

    rate: str | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None
    #: each packet's delay varies by up to this much either way (uniform), order kept
    jitter_ms: float | None = None

    @property
    def empty(self) -> bool:
        return self.rate is None and not self.delay_ms and not self.loss_pct

    def describe(self) -> str:
        parts = []
        if self.rate:
            parts.append(f"rate {self.rate}")
        if self.delay_ms:
            jitter = f" jitter {self.jitter_ms:g}ms" if self.jitter_ms else ""
            parts.append(f"delay {self.delay_ms:g}ms{jitter}")
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
        return ", ".join(parts) or "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LabSpec:
    """The shape of a lab: everything ``lab up`` was asked for (compared for idempotence)."""

    name: str = DEFAULT_NAME
    nodes: int = 2
    subnet: str = DEFAULT_SUBNET
    rate: str | None = None
    delay: str | None = None
    loss: str | None = None
    mtu: int = 1500
    ifname: str = DEFAULT_IFNAME
    #: nodes on an inner subnet behind a router namespace (:mod:`ddpnet.lab.router`)
    behind: tuple[int, ...] = ()
    #: what the router does: ``nat`` (masquerade inner -> outer) or ``routed`` (forward only)
    router: str = ROUTER_NAT
    #: (port, node): the router's outer address:port is DNAT'd to that inner node's port
    forwards: tuple[tuple[int, int], ...] = ()
    #: a second network (a subnet of 198.18.0.0/15): each node gets a second NIC on it
    second_net: str | None = None
    second_ifname: str = DEFAULT_SECOND_IFNAME
    #: tc rate of the second NIC (``rate`` shapes only the first)
    second_rate: str | None = None
    #: nodes whose second NIC is created first (lower ifindex, first in getifaddrs order)
    second_first: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabSpec:
        kept = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        # JSON has lists: the spec compares as tuples (idempotent ``up``)
        for key in ("behind", "second_first"):
            if key in kept:
                kept[key] = tuple(int(i) for i in kept[key])
        if "forwards" in kept:
            kept["forwards"] = tuple((int(p), int(n)) for p, n in kept["forwards"])
        return cls(**kept)

    @property
    def shaping(self) -> Shaping:
        return Shaping(
            rate=self.rate or None,
            delay_ms=delay_ms(self.delay) if self.delay else None,
            loss_pct=loss_percent(self.loss) if self.loss else None,
        )

    @property
    def second_shaping(self) -> Shaping:
        """The second NIC's: a rate only (faults and ``delay``/``loss`` stay on the first)."""
        return Shaping(rate=self.second_rate or None)


@dataclass(frozen=True)
class LabNode:
    """One node of a lab: its namespace, hostname and address on the lab interface."""

    index: int
    name: str
    namespace: str
    hostname: str
    ifname: str
    address: str
    prefix: int = 24
    port: str = ""  # the bridge port (in the switch namespace) its veth is paired with
    #: the second NIC (``second_net``): its name, address, prefix and bridge port ("" if none)
    second_ifname: str = ""
    second_address: str = ""
    second_prefix: int = 0
    second_port: str = ""
    #: whether the second NIC is created first (so it has the lower ifindex)
    second_first: bool = False

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefix}"

    @property
    def second_cidr(self) -> str:
        return f"{self.second_address}/{self.second_prefix}" if self.second_address else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Router:
    """The router namespace of a lab with nodes behind it: one leg (``eth0``) on the lab
    subnet at ``outer``, one (``eth1``) on the inner subnet at ``inner``; ``forwards`` are
    (port, inner address) pairs DNAT'd from ``outer``."""

    namespace: str
    mode: str
    outer: str
    outer_prefix: int
    inner: str
    subnet: str
    forwards: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "mode": self.mode, "outer": self.outer,
                "inner": self.inner, "subnet": self.subnet,
                "forwards": [{"port": p, "to": a} for p, a in self.forwards]}


@dataclass(frozen=True)
class Plan:
    """A validated spec and every name and address it implies."""

    spec: LabSpec
    switch: str
    nodes: tuple[LabNode, ...] = field(default_factory=tuple)
    router: Router | None = None

    @property
    def namespaces(self) -> tuple[str, ...]:
        extra = (self.router.namespace,) if self.router else ()
        return (self.switch, *extra, *(n.namespace for n in self.nodes))

    def inner(self, node: LabNode) -> bool:
        """Whether ``node`` sits behind the router."""
        return node.index in self.spec.behind


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(
            f"bad lab name {name!r}: lowercase letters, digits and '-', starting with a letter, "
            "at most 24 characters",
            "for example --name lab or --name exp1",
        )
    return name


def lab_network(subnet: str, example: str = f"--subnet {DEFAULT_SUBNET}"
                ) -> ipaddress.IPv4Network:
    """The subnet, checked to lie inside 198.18.0.0/15 (a lab never uses other addresses);
    ``example`` is the hint's flag and value."""
    try:
        net = ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        raise ConfigError(f"bad subnet {subnet!r}: not an IPv4 network",
                          f"for example {example}") from None
    if not isinstance(net, ipaddress.IPv4Network) or not net.subnet_of(LAB_RANGE):
        raise ConfigError(
            f"subnet {subnet} is outside 198.18.0.0/15, the benchmarking range labs use",
            f"pick a subnet inside 198.18.0.0/15, for example {example}",
        )
    return net


def check_lab_cidr(cidr: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An extra address for a node: must also stay inside 198.18.0.0/15 (or, for IPv6,
    2001:2::/48)."""
    try:
        iface = ipaddress.ip_interface(cidr)
    except ValueError:
        raise ConfigError(f"bad address {cidr!r}: expected ADDRESS/PREFIX",
                          "for example 198.18.1.10/24") from None
    if not in_lab_range(iface.ip):
        raise ConfigError(f"address {cidr} is outside 198.18.0.0/15 and 2001:2::/48",
                          "lab addresses stay inside 198.18.0.0/15, e.g. 198.18.1.10/24 "
                          "(IPv6: 2001:2::/48, e.g. 2001:2::10/64)")
    return iface


def plan(spec: LabSpec) -> Plan:
    """Validate ``spec`` and derive every name and address (pure)."""
    validate_name(spec.name)
    if not isinstance(spec.nodes, int) or spec.nodes < 1:
        raise ConfigError(f"bad node count {spec.nodes!r}: need at least 1",
                          "for example --nodes 4")
    if spec.nodes > MAX_NODES:
        raise ConfigError(f"bad node count {spec.nodes}: a lab has at most {MAX_NODES} nodes",
                          f"each node is a namespace and an O(N) hosts file; use {MAX_NODES} "
                          "or fewer")
    net = lab_network(spec.subnet)
    hosts = net.num_addresses - 2 if net.prefixlen < 31 else net.num_addresses
    hosts -= 1 if spec.behind else 0  # the router's outer leg takes the last one
    if spec.nodes > hosts:
        raise ConfigError(
            f"subnet {spec.subnet} has room for {hosts} nodes, {spec.nodes} asked",
            "use a larger subnet, e.g. --subnet 198.18.0.0/16",
        )
    check_ifname(spec.ifname, "--ifname eth0")
    if not 68 <= int(spec.mtu) <= 65535:
        raise ConfigError(f"bad MTU {spec.mtu}: must be between 68 and 65535",
                          "for example --mtu 1500 or --mtu 9000")
    if spec.rate:
        rate_bits(spec.rate)
    spec.shaping  # noqa: B018  (validates delay and loss)
    router = plan_router(spec, net)
    second = plan_second(spec, net, router)
    first = int(net.network_address) + (1 if net.prefixlen < 31 else 0)
    nodes = tuple(
        LabNode(
            index=i,
            name=f"{spec.name}-n{i}",
            namespace=f"{spec.name}-n{i}",
            hostname=f"{spec.name}-n{i}",
            ifname=spec.ifname,
            address=inner_address(router, i) if router and i in spec.behind
            else str(ipaddress.IPv4Address(first + i)),
            prefix=24 if router and i in spec.behind else net.prefixlen,
            port=f"p{i}",
            **_second_fields(spec, second, i),
        )
        for i in range(spec.nodes)
    )
    return Plan(spec=spec, switch=spec.name + SWITCH_SUFFIX, nodes=nodes, router=router)


#: the decoy interface's /24s (``extra-iface``), the first that overlaps no lab subnet
DECOY_SUBNETS = ("198.19.254.0/24", "198.18.254.0/24", "198.19.253.0/24")


def decoy_subnet(lab: ipaddress.IPv4Network) -> ipaddress.IPv4Network | None:
    """The /24 an ``extra-iface`` decoy of a lab on ``lab`` takes (None: no room)."""
    return next((net for net in map(ipaddress.IPv4Network, DECOY_SUBNETS)
                 if not net.overlaps(lab)), None)


def plan_second(spec: LabSpec, net: ipaddress.IPv4Network,
                router: Router | None) -> ipaddress.IPv4Network | None:
    """The second network (validated: inside 198.18.0.0/15, room for every node, clear of
    the lab subnet, the router's inner subnet and the decoys), or None without one."""
    if not spec.second_net:
        if spec.second_rate or spec.second_first:
            raise ConfigError("--second-rate and --second-first need a second network",
                              "add --second-net, for example --second-net 198.18.2.0/24")
        return None
    second = lab_network(spec.second_net, "--second-net 198.18.2.0/24")
    for other, what in _taken(net, router):
        if second.overlaps(other):
            raise ConfigError(f"second network {spec.second_net} overlaps {other} ({what})",
                              "pick another subnet inside 198.18.0.0/15, for example "
                              "--second-net 198.18.2.0/24")
    hosts = second.num_addresses - 2 if second.prefixlen < 31 else second.num_addresses
    if spec.nodes > hosts:
        raise ConfigError(f"second network {spec.second_net} has room for {hosts} nodes, "
                          f"{spec.nodes} asked", "use a larger one, e.g. --second-net "
                          "198.18.128.0/17")
    _check_second_nic(spec)
    return second


def _taken(net: ipaddress.IPv4Network,
           router: Router | None) -> list[tuple[ipaddress.IPv4Network, str]]:
    """The networks a second network must stay clear of, each with what it is."""
    taken = [(net, "the lab subnet")]
    if router is not None:
        taken.append((ipaddress.IPv4Network(router.subnet), "the router's inner subnet"))
    decoy = decoy_subnet(net)
    if decoy is not None:
        taken.append((decoy, "the extra-iface decoys"))
    return taken


def _check_second_nic(spec: LabSpec) -> None:
    """The second NIC's name, rate and ``second_first`` nodes."""
    check_ifname(spec.second_ifname, "--second-ifname eth1")
    if spec.second_ifname == spec.ifname:
        raise ConfigError(f"--second-ifname {spec.second_ifname} is also the first NIC's name",
                          "name them apart, e.g. --ifname eth0 --second-ifname eth1")
    if spec.second_rate:
        rate_bits(spec.second_rate)
    bad = [i for i in spec.second_first if not (isinstance(i, int) and 0 <= i < spec.nodes)]
    if bad:
        raise ConfigError(f"--second-first: node {bad[0]!r} does not exist (the lab has nodes "
                          f"0-{spec.nodes - 1})", "for example --second-first 1")


def _second_fields(spec: LabSpec, second: ipaddress.IPv4Network | None,
                   index: int) -> dict[str, Any]:
    """Node ``index``'s second-NIC fields of :class:`LabNode` (none without a second net)."""
    if second is None:
        return {}
    first = int(second.network_address) + (1 if second.prefixlen < 31 else 0)
    return {"second_ifname": spec.second_ifname,
            "second_address": str(ipaddress.IPv4Address(first + index)),
            "second_prefix": second.prefixlen, "second_port": f"s{index}",
            "second_first": index in spec.second_first}


#: inner subnets a router may take, the first that does not overlap the lab subnet (the
#: extra-iface decoys use 198.19.254/253 and 198.18.254)
INNER_SUBNETS = ("198.19.1.0/24", "198.19.2.0/24", "198.18.1.0/24")


def inner_address(router: Router, index: int) -> str:
    """Node ``index`` behind the router: host ``index + 2`` of the inner /24 (1 is the
    router's inner leg)."""
    net = ipaddress.ip_network(router.subnet)
    return str(net.network_address + index + 2)


def plan_router(spec: LabSpec, net: ipaddress.IPv4Network) -> Router | None:
    """The router of a lab with ``behind`` nodes (validated), or None."""
    if spec.router not in (ROUTER_NAT, ROUTER_ROUTED):
        raise ConfigError(f"bad router mode {spec.router!r}: nat or routed",
                          "--nat NODES (masquerade) or --routed NODES (forward only)")
    behind = tuple(spec.behind)
    if not behind:
        if spec.forwards:
            raise ConfigError("a port forward needs nodes behind the router",
                              "for example --nat 0 --port-forward 29500:0")
        return None
    bad = sorted(i for i in behind if not (isinstance(i, int) and 0 <= i < spec.nodes))
    if bad or len(set(behind)) != len(behind):
        raise ConfigError(f"bad node list behind the router: {list(behind)} (the lab has "
                          f"nodes 0-{spec.nodes - 1}, each once)", "for example --nat 1,2")
    if max(behind) > 252 or net.prefixlen > 30:
        raise ConfigError("a router needs node indices up to 252 behind it and a lab subnet "
                          "of /30 or larger", "for example --nodes 4 --nat 1,2")
    inner = next((s for s in INNER_SUBNETS
                  if not ipaddress.ip_network(s).overlaps(net)), None)
    if inner is None:
        raise ConfigError(f"no free /24 for the inner subnet beside {spec.subnet}",
                          "use a smaller lab subnet, e.g. 198.18.0.0/24")
    rt = Router(namespace=spec.name + ROUTER_SUFFIX, mode=spec.router,
                outer=str(net.broadcast_address - 1), outer_prefix=net.prefixlen,
                inner=str(ipaddress.ip_network(inner).network_address + 1), subnet=inner)
    return replace(rt, forwards=_forwards(spec, rt))


def _forwards(spec: LabSpec, rt: Router) -> tuple[tuple[int, str], ...]:
    out = []
    for port, node in spec.forwards:
        if not (isinstance(port, int) and 1 <= port <= 65535) or node not in spec.behind:
            raise ConfigError(f"bad port forward {port}:{node}: a port 1-65535 to a node "
                              "behind the router", "for example --nat 0 --port-forward 29500:0")
        out.append((port, inner_address(rt, node)))
    if len({p for p, _ in out}) != len(out):
        raise ConfigError("one port forwarded twice", "one --port-forward per port")
    return tuple(out)


def namespace_pattern(name: str) -> re.Pattern[str]:
    """Matches exactly the namespaces lab ``name`` creates (for ``down`` without state)."""
    return re.compile(rf"^{re.escape(name)}-(?:sw|rt|n\d+)$")


# ---- /etc/hosts --------------------------------------------------------------------------

LOOPBACK_ALIAS = "127.0.1.1"


def hosts_file(p: Plan, node: LabNode, *, hostname_loopback: bool = False,
               entries: Sequence[tuple[str, str]] = ()) -> str:
    """The node's /etc/hosts: localhost, then every lab node. ``hostname_loopback`` adds the
    Debian default ``127.0.1.1 <hostname>`` line first (what makes gloo bind loopback);
    ``entries`` (address, name) replace the lab's line for that name on this node only (a
    stale, loopback or other-family entry)."""
    lines = ["# written by ddpnet lab " + p.spec.name, "127.0.0.1\tlocalhost"]
    lines += [f"{address}\t{name}" for address, name in entries]
    replaced = {name for _, name in entries}
    if hostname_loopback:
        lines.append(f"{LOOPBACK_ALIAS}\t{node.hostname}")
    lines.append("::1\tlocalhost ip6-localhost ip6-loopback")
    lines += [f"{n.address}\t{n.hostname}" for n in p.nodes if n.hostname not in replaced]
    return "\n".join(lines) + "\n"


# ---- ip -batch -----------------------------------------------------------------------------

def netns_add_batch(p: Plan) -> list[str]:
    """Lines for one ``ip -batch``: create every namespace (switch first)."""
    return [f"netns add {ns}" for ns in p.namespaces]


def switch_batch(p: Plan) -> list[str]:
    """Lines for ``ip -n <switch> -batch``: the bridge (run before the nodes' batches)."""
    bridges = (BRIDGE, *((INNER_BRIDGE,) if p.router else ()),
               *((SECOND_BRIDGE,) if p.spec.second_net else ()))
    lines = ["link set lo up"]
    for br in bridges:
        lines += [f"link add {br} mtu {p.spec.mtu} type bridge stp_state 0 forward_delay 0",
                  f"link set {br} up"]
    return lines


def node_batch(p: Plan, node: LabNode) -> list[str]:
    """Lines for ``ip -n <node> -batch``: the veth pair created straight into the node and the
    switch namespaces (never the host's), its address, and the bridge port."""
    nics = [_veth_lines(p, node.ifname, node.port, node.cidr)]
    if node.second_address:
        second = _veth_lines(p, node.second_ifname, node.second_port, node.second_cidr)
        nics.insert(0 if node.second_first else 1, second)
    lines = ["link set lo up", *(line for nic in nics for line in nic)]
    rt = p.router
    if rt is not None and p.inner(node):  # behind the router: it is the way out
        lines.append(f"route add default via {rt.inner} dev {node.ifname} onlink")
    elif rt is not None and rt.mode == ROUTER_ROUTED:  # a routed network: both ways
        lines.append(f"route add {rt.subnet} via {rt.outer} dev {node.ifname} onlink")
    return lines


def _veth_lines(p: Plan, ifname: str, port: str, cidr: str) -> list[str]:
    """One NIC of a node: a veth created straight into the node with its peer ``port`` in the
    switch namespace (the kernel numbers them in creation order), its address, up."""
    mtu = p.spec.mtu
    return [f"link add {ifname} mtu {mtu} type veth peer name {port} mtu {mtu} "
            f"netns {p.switch}", f"addr add {cidr} dev {ifname}", f"link set {ifname} up"]


def switch_ports_batch(p: Plan) -> list[str]:
    """Lines for ``ip -n <switch> -batch`` after the nodes': attach and raise every port."""
    lines: list[str] = []
    for node in p.nodes:
        bridge = INNER_BRIDGE if p.inner(node) else BRIDGE
        lines += [f"link set {node.port} master {bridge}", f"link set {node.port} up"]
        if node.second_port:
            lines += [f"link set {node.second_port} master {SECOND_BRIDGE}",
                      f"link set {node.second_port} up"]
    if p.router:
        for port, bridge in ((ROUTER_PORTS[0], BRIDGE), (ROUTER_PORTS[1], INNER_BRIDGE)):
            lines += [f"link set {port} master {bridge}", f"link set {port} up"]
    return lines


#: the router's legs (outer, inner) and their ports on the bridges (switch namespace)
ROUTER_LEGS = ("eth0", "eth1")
ROUTER_PORTS = ("r0", "r1")


def router_batch(p: Plan) -> list[str]:
    """Lines for ``ip -n <router> -batch``: its two legs, created straight into the router
    and switch namespaces (run before :func:`switch_ports_batch`)."""
    rt = p.router
    if rt is None:
        return []
    mtu = p.spec.mtu
    lines = ["link set lo up"]
    for leg, port, cidr in ((ROUTER_LEGS[0], ROUTER_PORTS[0], f"{rt.outer}/{rt.outer_prefix}"),
                            (ROUTER_LEGS[1], ROUTER_PORTS[1], f"{rt.inner}/24")):
        lines += [f"link add {leg} mtu {mtu} type veth peer name {port} mtu {mtu} "
                  f"netns {p.switch}", f"addr add {cidr} dev {leg}", f"link set {leg} up"]
    return lines


def router_nft(p: Plan) -> str | None:
    """The router's nftables ruleset: in ``nat`` mode it masquerades what the inner subnet
    sends out of the outer leg and forwards only replies (and port forwards) inwards, as a
    home or cloud NAT gateway does; ``forwards`` DNAT the outer address's ports to inner
    nodes. ``routed`` mode forwards both ways untouched (no ruleset unless a port forward)."""
    rt = p.router
    if rt is None or (rt.mode == ROUTER_ROUTED and not rt.forwards):
        return None
    outer, inner = ROUTER_LEGS
    chains = []
    if rt.forwards:
        rules = "".join(f"    iifname \"{outer}\" ip daddr {rt.outer} tcp dport {port} "
                        f"dnat to {to}\n" for port, to in rt.forwards)
        chains.append("  chain prerouting {\n    type nat hook prerouting priority -100; "
                      f"policy accept;\n{rules}  }}\n")
    if rt.mode == ROUTER_NAT:
        chains.append("  chain postrouting {\n    type nat hook postrouting priority 100; "
                      f"policy accept;\n    ip saddr {rt.subnet} oifname \"{outer}\" "
                      "masquerade\n  }\n")
        chains.append("  chain forward {\n    type filter hook forward priority 0; "
                      f"policy accept;\n    iifname \"{outer}\" oifname \"{inner}\" ct state "
                      f"established,related accept\n    iifname \"{outer}\" oifname "
                      f"\"{inner}\" ct status dnat accept\n    iifname \"{outer}\" "
                      f"oifname \"{inner}\" drop\n  }}\n")
    return f"table ip {ROUTER_TABLE} {{\n" + "".join(chains) + "}\n"


ROUTER_TABLE = "ddpnet_lab_router"


def netns_del_batch(namespaces: Sequence[str]) -> list[str]:
    return [f"netns del {ns}" for ns in namespaces]


# ---- tc ------------------------------------------------------------------------------------

def tbf_burst_bytes(rate: str) -> int:
    """A token bucket that holds ~4 ms at the rate (and at least 64 KiB, one GSO segment), so
    the limit holds at 1 kHz timer resolution without starving a fast TCP flow."""
    return max(65536, int(rate_bits(rate) / 8 * 0.004))


def qdisc_lines(dev: str, shaping: Shaping, *, egress_netem: bool = True) -> list[str]:
    """``tc -batch`` lines that (re)build ``dev``'s root qdisc: tbf for the rate, netem below it
    for the delay (``egress_netem=False`` where the kernel lacks netem or on switch ports;
    loss is done in nftables, see :func:`ddpnet.lab.faults.nft_ruleset`). Starts by deleting
    the root (a missing one is fine)."""
    lines = [f"qdisc del dev {dev} root"]
    jitter = f" {shaping.jitter_ms:g}ms" if shaping.jitter_ms else ""
    netem = f"netem delay {shaping.delay_ms:g}ms{jitter} limit 100000" if (
        egress_netem and shaping.delay_ms) else ""
    if shaping.rate:
        burst = tbf_burst_bytes(shaping.rate)
        lines.append(f"qdisc add dev {dev} root handle 1: tbf rate {shaping.rate} "
                     f"burst {burst} latency 50ms")
        if netem:
            lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: {netem}")
    elif netem:
        lines.append(f"qdisc add dev {dev} root handle 1: {netem}")
    return lines


# ---- node selection --------------------------------------------------------------------------

def parse_nodes(text: str | Sequence[int] | None, count: int) -> tuple[int, ...]:
    """``None``/``"all"`` -> every node; ``"0,2-3"`` or ``[0, 2]`` -> those indices, sorted."""
    if text is None or (isinstance(text, str) and text.strip() in ("", "all")):
        return tuple(range(count))
    chosen: set[int] = set()
    if isinstance(text, str):
        for part in text.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,18}))?", part)  # int() refuses 4300+ digits
            if not m:
                raise ConfigError(f"bad node list {text!r}: expected all, 0,2 or 1-3",
                                  "for example --nodes all or --nodes 0,2-3")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise ConfigError(f"bad node range {part!r} in {text!r}", "for example 1-3")
            # a huge range must not fill memory: expand only what exists, keep hi to report it
            chosen.update(range(lo, min(hi, count - 1) + 1), (hi,))
    else:
        chosen.update(int(i) for i in text)
    bad = sorted(i for i in chosen if not 0 <= i < count)
    if bad:
        raise ConfigError(f"node {bad[0]} does not exist: the lab has nodes 0-{count - 1}",
                          "see: ddpnet lab status")
    if not chosen:
        raise ConfigError(f"no nodes chosen in {text!r}", "for example --nodes all")
    return tuple(sorted(chosen))


def run_environ(p: Plan, chosen: Sequence[int], position: int,
                master_port: int = DEFAULT_MASTER_PORT) -> dict[str, str]:
    """The variables ``lab run`` exports to the ``position``-th chosen node: the chosen nodes
    form the cluster, the first chosen one (node 0 when all run) is the master."""
    master = p.nodes[chosen[0]]
    return {
        "NNODES": str(len(chosen)),
        "NODE_RANK": str(position),
        "MASTER_ADDR": master.address,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(chosen)),
        "RANK": str(position),
    }


# ---- running a command inside a node -----------------------------------------------------

#: sets the hostname of the fresh UTS namespace, then becomes the command (no extra process)
_SET_HOSTNAME = 'printf %s "$0" > /proc/sys/kernel/hostname && exec "$@"'


def node_argv(namespace: str, hostname: str, argv: Sequence[str], *,
              keep_cgroup: bool = False) -> list[str]:
    """The command line that runs ``argv`` as node ``namespace``: its network namespace, its
    /sys and /etc/netns files (``ip netns exec`` mounts them in a private mount namespace) and
    its hostname (a private UTS namespace). Every step execs, so the returned process's pid is
    the command's own pid.

    ``keep_cgroup=True`` is for daemons that need ``/sys/fs/cgroup`` (slurmd): ``ip netns
    exec`` remounts /sys and hides it, so this variant enters the network namespace with
    ``nsenter``, mounts the node's sysfs and hosts file itself and re-attaches the host's cgroup
    tree, all in a private mount namespace (the recipe in shared/notes/slurm-in-namespaces.sh).
    """
    if not argv:
        raise ConfigError("no command given", "for example: ddpnet lab run -- hostname")
    if not keep_cgroup:
        return ["ip", "netns", "exec", namespace, "unshare", "--uts", "--",
                "sh", "-c", _SET_HOSTNAME, hostname, *argv]
    return ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "--mount",
            "--propagation", "private", "--", "sh", "-ec", _FULL_NODE, namespace, hostname,
            *argv]


#: $0 = namespace, $1 = hostname; mounts as ``ip netns exec`` would, but keeps the cgroup tree
_FULL_NODE = (
    'ns=$0; hn=$1; shift; '
    'for f in /etc/netns/"$ns"/*; do [ -e "$f" ] && mount --bind "$f" /etc/"${f##*/}"; done; '
    'cg=$(mktemp -d /tmp/ddpnet-cg.XXXXXX); mount --rbind /sys/fs/cgroup "$cg"; '
    'mount -t sysfs sysfs /sys; mount --rbind "$cg" /sys/fs/cgroup; umount -l "$cg"; '
    'rmdir "$cg"; printf %s "$hn" > /proc/sys/kernel/hostname; exec "$@"'
)
