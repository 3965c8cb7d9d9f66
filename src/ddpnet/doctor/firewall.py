"""firewall family: which manager filters incoming traffic (firewalld, ufw, nftables,
iptables, none) and whether the ports training needs are accepted from the cluster subnet:
MASTER_PORT (the TCPStore), torchrun's 29400 (c10d rendezvous), and the ephemeral range gloo
and NCCL listen on for their peer connections."""

from __future__ import annotations

import ipaddress

from ddpnet.doctor import firewall_rules as fr
from ddpnet.doctor.base import Check, CheckResult, Host, Inputs
from ddpnet.doctor.rendezvous import is_master_host
from ddpnet.env.jobport import C10D_PORT, parse_port_range
from ddpnet.net.firewall import FirewallState, read_state
from ddpnet.net.names import is_loopback

_PAST = {"drop": "dropped", "reject": "rejected", "accept": "accepted"}


def state_of(host: Host) -> FirewallState:
    """The host's firewall state from :mod:`ddpnet.net.firewall`, read once per doctor run."""
    return host.memo.get("firewall", lambda: read_state(etc=host.etc, proc=host.proc,
                                                        run=host.run, which=host.which))


def cluster_net(inputs: Inputs) -> ipaddress.IPv4Network | None:
    """The cluster subnet: given (--cluster-subnet), else the training interface's, else
    (outside a job the training interface is loopback) the cluster NIC's; never loopback,
    which in a rule's source would admit only this host and shut every peer out."""
    if inputs.cluster_subnet:
        try:
            return ipaddress.IPv4Network(inputs.cluster_subnet, strict=False)
        except ValueError:
            return None
    for name in (inputs.selected.name, inputs.cluster.name):
        for iface in inputs.interfaces:
            if iface.name != name:
                continue
            nets = [ipaddress.IPv4Network(f"{a.ip}/{a.prefix}", strict=False)
                    for a in iface.addresses if a.family == 4]
            usable = [n for n in nets if not n.is_loopback and not n.is_link_local]
            if usable:
                return usable[0]
    return None


#: the fix when no subnet is known: ask for it rather than guess a rule's source
ASK_SUBNET = ("rerun with the cluster's subnet to get the rule: ddpnet doctor --cluster-subnet "
              "CIDR (e.g. 10.0.0.0/24)")


def peer_in(net: ipaddress.IPv4Network | None, own: str | None) -> str | None:
    """A representative peer address in the cluster subnet (not this host's)."""
    if net is None:
        return None
    for addr in net.hosts() if net.num_addresses > 2 else iter([net.network_address]):
        if str(addr) != own:
            return str(addr)
    return str(net.network_address)


def _iptables_for(state: FirewallState, family: int) -> str | None:
    """The iptables dump that sees a packet of ``family``: IPv6 has its own tables, which
    matter as soon as any firewall filters (a v4-only rule set leaves v6 wide open)."""
    if family == 6:
        return state.ip6tables if state.managers else None
    return state.iptables if "iptables" in state.managers else None


def decide(state: FirewallState, pkt: fr.Packet) -> list[tuple[str, fr.Decision]]:
    """Every active manager's decision for ``pkt`` (the packet must pass all of them)."""
    out: list[tuple[str, fr.Decision]] = []
    if state.firewalld:
        d = fr.evaluate_firewalld(state.firewalld, pkt)
        if d:
            out.append(("firewalld", d))
    if state.ufw_status:
        d = fr.evaluate_ufw(state.ufw_status, state.ufw_policy, pkt)
        if d:
            out.append(("ufw", d))
    ipt = _iptables_for(state, pkt.family)
    if ipt:
        d = fr.evaluate_iptables(ipt, pkt)
        if d:
            out.append(("iptables" if pkt.family == 4 else "ip6tables", d))
    if state.nft and "nftables" in state.managers:
        try:
            d = fr.evaluate_nft(state.nft, pkt, skip_iptables=ipt is not None)
        except (ValueError, KeyError):
            d = None
        if d:
            out.append(("nftables", d))
    return out


def fix_for(manager: str, decision: fr.Decision, ports: str, subnet: str | None) -> str:
    src = subnet or "<cluster subnet>"
    dash = ports.replace(":", "-")
    if manager == "nftables":
        fam, table, chain = ([*decision.where.split(), "inet", "filter", "input"])[:3]
        return (f"nft insert rule {fam} {table} {chain} ip saddr {src} tcp dport {dash} accept"
                f"  (persist it in /etc/nftables.conf, or: ddpnet tune)")
    if manager == "iptables":
        opt = f"--dport {ports}"
        return (f"iptables -I INPUT -s {src} -p tcp {opt} -j ACCEPT  (persist: "
                "iptables-save > /etc/sysconfig/iptables or netfilter-persistent save)")
    if manager == "firewalld":
        return (f"firewall-cmd --permanent --zone=trusted --add-source={src} && "
                "firewall-cmd --reload")
    return f"ufw allow proto tcp from {src} to any port {ports}"


def only_from(net: ipaddress.IPv4Network, inputs: Inputs) -> str:
    """nft commands that drop training ports from outside ``net`` (loopback stays open)."""
    return (f"nft add table inet ddpnet; nft add chain inet ddpnet input '{{ type filter hook "
            f"input priority 0; }}'; nft add rule inet ddpnet input iifname != lo ip saddr "
            f"!= {net} tcp dport {{ {inputs.master_port}, 32768-60999 }} drop")


class Manager(Check):
    id = "firewall.manager"
    family = "firewall"
    title = "firewall manager"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        state = state_of(host)
        facts = {"firewall": state.facts()}
        if state.unreadable and not state.managers:
            return self.skip(f"firewall unknown: {state.unknown()}",
                             "run ddpnet doctor as root with nft or iptables installed and on "
                             "PATH to inspect the firewall", **facts)
        if not state.managers:
            net = cluster_net(inputs)
            return self.warn(
                "no firewall: anyone who reaches this node can use the unauthenticated "
                f"TCPStore on port {inputs.master_port}",
                "training works, but the rendezvous port and the ephemeral ports are open to "
                "every network this node is on",
                (f"accept only the cluster subnet {net}, e.g. " + only_from(net, inputs))
                if net else ASK_SUBNET,
                **facts)
        return self.ok(f"active: {', '.join(state.managers)}", **facts)


class PortAccepted(Check):
    family = "firewall"

    def __init__(self, check_id: str, title: str) -> None:
        self.id = check_id  # type: ignore[misc]
        self.title = title  # type: ignore[misc]

    def ports(self, host: Host, inputs: Inputs) -> tuple[str, list[int]] | None:
        """(spec shown and used in the fix, representative ports)."""
        return str(inputs.master_port), [inputs.master_port]

    def severity(self, host: Host, inputs: Inputs) -> str:
        return "fail"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        wanted = self.ports(host, inputs)
        if wanted is None:
            return self.skip("static rendezvous: torchrun's c10d port 29400 is not used")
        spec, ports = wanted
        state = state_of(host)
        if not state.managers:
            return self.ok(f"{spec}/tcp open (no firewall)") if not state.unreadable else \
                self.skip(f"{spec}/tcp unknown: {state.unknown()}")
        net = cluster_net(inputs)
        src = peer_in(net, inputs.selected.address)
        blocked: list[tuple[str, fr.Decision, int]] = []
        uncertain: list[str] = []
        accepted_by: list[str] = []
        for port in ports:
            pkt = fr.Packet(port, src, inputs.selected.address, inputs.selected.name)
            for manager, d in decide(state, pkt):
                uncertain.extend(d.uncertain)
                if d.verdict != "accept":
                    blocked.append((manager, d, port))
                else:
                    accepted_by.append(f"{manager}: {d.by}")
        origin = f"from {net}" if net else "from any source"
        if blocked:
            manager, d, port = blocked[0]
            status = self.severity(host, inputs)
            return self.result(
                status,  # type: ignore[arg-type]
                f"{spec}/tcp {origin} is {_PAST[d.verdict]} by {manager}",
                f"port {port}: {d.by}",
                fix_for(manager, d, spec, str(net) if net else None),
            )
        if uncertain:
            return self.warn(
                f"{spec}/tcp {origin}: accepted unless a rule we cannot evaluate matches",
                "; ".join(dict.fromkeys(uncertain)),
                f"check with: nft list ruleset / iptables -S INPUT, and accept {spec}/tcp "
                f"{origin}")
        return self.ok(f"{spec}/tcp accepted {origin}", "; ".join(dict.fromkeys(accepted_by)))


class MasterPortOpen(PortAccepted):
    def __init__(self) -> None:
        super().__init__("firewall.master-port", "MASTER_PORT accepted")

    def severity(self, host: Host, inputs: Inputs) -> str:
        # a closed MASTER_PORT hangs every other node only where the TCPStore runs
        return "fail" if is_master_host(host, inputs)[0] else "warn"


class C10dPortOpen(PortAccepted):
    def __init__(self) -> None:
        super().__init__("firewall.c10d-port", "c10d port accepted")

    def ports(self, host: Host, inputs: Inputs) -> tuple[str, list[int]] | None:
        if not inputs.c10d:
            return None
        return str(C10D_PORT), [C10D_PORT]


class EphemeralOpen(PortAccepted):
    def __init__(self) -> None:
        super().__init__("firewall.ephemeral", "ephemeral ports accepted")

    def ports(self, host: Host, inputs: Inputs) -> tuple[str, list[int]] | None:
        low, high = parse_port_range(
            host.sysctl("net.ipv4.ip_local_port_range") or "32768 60999")
        return f"{low}:{high}", sorted({low, (low + high) // 2, high})


#: sources outside any cluster subnet, to ask "would a stranger reach the store?"
#: (TEST-NET-3 and TEST-NET-1, documentation ranges that no real peer uses)
_OUTSIDERS = ("203.0.113.7", "192.0.2.7")


def outsider(net: ipaddress.IPv4Network | None) -> str:
    """A source address outside the cluster subnet (pure)."""
    return next(a for a in _OUTSIDERS if net is None or ipaddress.ip_address(a) not in net)


class MasterPortExposed(Check):
    """The rendezvous store (TCPStore) is unauthenticated: PyTorch's security notes say it
    must not be reachable from outside the cluster. Judged on the master host only."""

    id = "firewall.master-port-exposed"
    family = "firewall"
    title = "MASTER_PORT closed to outsiders"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        master, why = is_master_host(host, inputs)
        if not master:
            return self.skip(f"not the master host ({why})")
        if is_loopback(inputs.master_addr) or inputs.master_addr == "localhost":
            return self.ok(f"MASTER_ADDR {inputs.master_addr} is loopback: the store is local")
        net = cluster_net(inputs)
        fix = (f"open {inputs.master_port}/tcp to the cluster subnet only: ddpnet tune "
               f"--cluster-subnet {net or 'CIDR'} --apply")
        state = state_of(host)
        if not state.managers:
            return self.skip("no firewall: firewall.manager names the exposure")
        return self._judge(state, inputs, net, fix)

    def _judge(self, state: FirewallState, inputs: Inputs,
               net: ipaddress.IPv4Network | None, fix: str) -> CheckResult:
        """An outsider's packet over IPv4 and, where this host has a global IPv6 address,
        over IPv6 (a store on ``::``, as torchrun's, answers there too)."""
        port = inputs.master_port
        src = outsider(net)
        v4 = fr.Packet(port, src, inputs.selected.address, inputs.selected.name)
        opened = _accepted(decide(state, v4))
        v6 = global_v6(inputs)
        opened6 = None
        if v6 is not None:
            verdicts6 = decide(state, fr.Packet(port, OUTSIDER_V6, v6[1], v6[0], family=6))
            opened6 = _accepted(verdicts6) or _unfiltered_v6(state, verdicts6)
        if opened:
            return self.warn(f"{port}/tcp accepts {src}, outside the cluster subnet "
                             f"{net or '(unknown)'}: the store is unauthenticated", opened, fix)
        if opened6 and v6 is not None:
            return self.warn(
                f"{port}/tcp is closed to outsiders over IPv4 but accepts {OUTSIDER_V6} over "
                f"IPv6 ({v6[0]} {v6[1]}): the rules cover IPv4 only", opened6,
                f"{fix} (it writes the IPv6 rules too), or: ip6tables -I INPUT -p tcp "
                f"--dport {port} -j DROP")
        checked = " and IPv6" if opened6 is not None else ""
        return self.ok(f"{port}/tcp from outside {net or 'the cluster'} is not accepted "
                       f"(IPv4{checked})")


#: an outsider over IPv6 (the documentation range 2001:db8::/32: no real peer uses it)
OUTSIDER_V6 = "2001:db8::7"


def _accepted(verdicts: list[tuple[str, fr.Decision]]) -> str:
    """The rules that accept, joined, when every manager accepts; "" otherwise."""
    if verdicts and all(d.verdict == "accept" for _, d in verdicts):
        return "; ".join(f"{m}: {d.by}" for m, d in verdicts)
    return ""


def _unfiltered_v6(state: FirewallState, verdicts: list[tuple[str, fr.Decision]]) -> str:
    """Why IPv6 input is open when no manager has a rule set that sees it (an ``ip`` nft
    table or iptables alone filter IPv4 only); "" when that cannot be known."""
    if verdicts or (state.ip6tables is None and state.nft is None):
        return ""
    return f"no rule set of {', '.join(state.managers)} sees IPv6 input"


def global_v6(inputs: Inputs) -> tuple[str, str] | None:
    """(interface, address) of a global IPv6 address, the selected interface's first."""
    ordered = sorted(inputs.interfaces, key=lambda i: i.name != inputs.selected.name)
    for iface in ordered:
        for addr in iface.addresses:
            ip = ipaddress.ip_address(addr.ip.split("%")[0])
            if addr.family == 6 and not (ip.is_link_local or ip.is_loopback):
                return iface.name, addr.ip
    return None


CHECKS: tuple[Check, ...] = (Manager(), MasterPortOpen(), MasterPortExposed(), C10dPortOpen(),
                             EphemeralOpen())

