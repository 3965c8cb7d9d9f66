"""interfaces family: the training interface (chosen by ``ddpnet.net.select``) is up with an
address; no subnet is reachable through two interfaces; no bridge NCCL could pick by mistake;
the training address is static (the guides want static IPs: a DHCP renewal that changes the
address breaks a running job's rendezvous)."""

from __future__ import annotations

import configparser
import ipaddress
import re

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs, InterfaceLike

_BRIDGE_PREFIXES = ("docker", "virbr", "br-", "cni", "flannel", "cali", "vmnet", "lxcbr",
                    "podman")


def find(inputs: Inputs, name: str | None) -> InterfaceLike | None:
    return next((i for i in inputs.interfaces if i.name == name), None)


def v4_networks(iface: InterfaceLike) -> list[ipaddress.IPv4Network]:
    nets = []
    for addr in iface.addresses:
        if addr.family == 4:
            nets.append(ipaddress.IPv4Network(f"{addr.ip}/{addr.prefix}", strict=False))
    return nets


class Selected(Check):
    id = "interfaces.selected"
    family = "interfaces"
    title = "training interface"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        sel = inputs.selected
        if sel.name is None:
            return self.fail("no training interface could be selected", sel.reason,
                             "export GLOO_SOCKET_IFNAME=<iface> NCCL_SOCKET_IFNAME=<iface> "
                             "naming the interface on the cluster network")
        iface = find(inputs, sel.name)
        if iface is None:
            return self.fail(f"selected interface {sel.name} does not exist", sel.reason,
                             "check GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME against `ip -br "
                             "addr`", interface=sel.name)
        addrs = [f"{a.ip}/{a.prefix}" for a in iface.addresses
                 if not a.ip.lower().startswith("fe80:")]
        nets = v4_networks(iface)
        address = sel.address or (iface.addresses[0].ip if iface.addresses else None)
        subnet = next((str(n) for n in nets if address and ipaddress.ip_address(address) in n),
                      str(nets[0]) if nets else None)
        facts = {"interface": iface.name, "address": address, "mtu": iface.mtu,
                 "subnet": subnet, "link_speed_mbps": iface.speed_mbps,
                 "interface_kind": iface.kind}
        speed = f"{iface.speed_mbps} Mb/s" if iface.speed_mbps else "speed unknown"
        desc = f"{iface.name} {', '.join(addrs) or 'no address'} mtu {iface.mtu} {speed}"
        if not iface.up:
            return self.fail(f"{iface.name} is down", desc, f"ip link set {iface.name} up",
                             **facts)
        if not iface.addresses:
            return self.fail(f"{iface.name} has no address", desc,
                             f"give {iface.name} a static address on the cluster subnet",
                             **facts)
        if iface.kind == "loopback" and inputs.num_nodes > 1:
            return self.fail(f"{inputs.num_nodes}-node job would train over loopback", desc,
                             "set MASTER_ADDR to the rank-0 host's cluster address", **facts)
        return self.ok(desc, sel.reason, **facts)


class SameSubnet(Check):
    id = "interfaces.same-subnet"
    family = "interfaces"
    title = "one interface per subnet"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        seen: dict[ipaddress.IPv4Network, list[str]] = {}
        for iface in inputs.interfaces:
            if iface.kind == "loopback" or not iface.up:
                continue
            for net in v4_networks(iface):
                if iface.name not in seen.setdefault(net, []):
                    seen[net].append(iface.name)
        dup = {str(n): names for n, names in seen.items() if len(names) > 1}
        if not dup:
            return self.ok("no subnet is on two interfaces")
        text = "; ".join(f"{n} on {', '.join(names)}" for n, names in dup.items())
        first = next(iter(dup.values()))
        return self.warn(
            f"subnet on several interfaces: {text}",
            "replies may leave through the other interface (asymmetric routing, rp_filter "
            "drops); NCCL/gloo may pick either",
            f"pin the interface: export GLOO_SOCKET_IFNAME={first[0]} "
            f"NCCL_SOCKET_IFNAME={first[0]}, or remove the extra address")


def is_bridge(iface: InterfaceLike) -> bool:
    return iface.kind in ("bridge", "docker") or iface.name.startswith(_BRIDGE_PREFIXES)


class Bridges(Check):
    id = "interfaces.bridges"
    family = "interfaces"
    title = "container/VM bridges"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        bridges = [i for i in inputs.interfaces
                   if is_bridge(i) and i.up and v4_networks(i) and i.name != inputs.selected.name]
        if not bridges:
            return self.ok("no container or VM bridge with an address")
        names = ", ".join(i.name for i in bridges)
        pinned = host.environ.get("NCCL_SOCKET_IFNAME")
        if pinned:
            return self.ok(f"bridges {names} present, NCCL_SOCKET_IFNAME={pinned} pins NCCL")
        target = inputs.selected.name or "<training iface>"
        return self.warn(
            f"bridges NCCL could pick: {names}",
            "without NCCL_SOCKET_IFNAME NCCL picks the first non-loopback interface (it "
            "skips only docker*); a virbr/br- bridge is reachable only from this host",
            f"export NCCL_SOCKET_IFNAME={target} GLOO_SOCKET_IFNAME={target} (ddpnet.init "
            "does this)")


def dhcp_source(host: Host, ifname: str) -> tuple[bool, str] | None:
    """Whether ``ifname`` is configured by DHCP, and which file says so; None if no network
    configuration mentions it. Reads NetworkManager keyfiles, ifcfg, netplan and ifupdown."""
    nm = host.etc / "NetworkManager" / "system-connections"
    for path in sorted(nm.glob("*")) if nm.is_dir() else []:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            parser.read_string(host.read(path) or "")
        except configparser.Error:
            continue
        if parser.get("connection", "interface-name", fallback=None) != ifname:
            continue
        method = parser.get("ipv4", "method", fallback="auto")
        return method == "auto", f"{path}: [ipv4] method={method}"
    ifcfg = host.etc / "sysconfig" / "network-scripts" / f"ifcfg-{ifname}"
    text = host.read(ifcfg)
    if text is not None:
        m = re.search(r"^\s*BOOTPROTO\s*=\s*[\"']?(\w+)", text, re.M | re.I)
        proto = m.group(1).lower() if m else "none"
        return proto == "dhcp", f"{ifcfg}: BOOTPROTO={proto}"
    netplan = host.etc / "netplan"
    for path in sorted(netplan.glob("*.yaml")) if netplan.is_dir() else []:
        found = _netplan_dhcp(host.read(path) or "", ifname)
        if found is not None:
            return found, f"{path}: {ifname} dhcp4: {'true' if found else 'false'}"
    text = host.read(host.etc / "network" / "interfaces")
    if text:
        m = re.search(rf"^\s*iface\s+{re.escape(ifname)}\s+inet\s+(\w+)", text, re.M)
        if m:
            return m.group(1) == "dhcp", f"/etc/network/interfaces: iface {ifname} inet " \
                                        f"{m.group(1)}"
    return None


def _netplan_dhcp(text: str, ifname: str) -> bool | None:
    """``dhcp4`` of ``ifname`` in a netplan file, by indentation (no YAML dependency)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(rf"^(\s*)[\"']?{re.escape(ifname)}[\"']?\s*:\s*$", line)
        if not m:
            continue
        indent = len(m.group(1))
        for sub in lines[i + 1:]:
            if sub.strip() and len(sub) - len(sub.lstrip()) <= indent:
                break
            d = re.match(r"^\s*dhcp4\s*:\s*(\S+)", sub)
            if d:
                return d.group(1).strip("\"'").lower() in ("true", "yes", "on")
        return False
    return None


class Dhcp(Check):
    id = "interfaces.static-address"
    family = "interfaces"
    title = "static address"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        name = inputs.selected.name
        if name is None or name == "lo":
            return self.skip("no training interface")
        found = dhcp_source(host, name)
        if found is None:
            return self.ok(f"{name}: no DHCP configuration found",
                           "no NetworkManager keyfile, ifcfg, netplan or ifupdown entry")
        dhcp, where = found
        if not dhcp:
            return self.ok(f"{name} is statically configured", where)
        return self.warn(
            f"{name} gets its address by DHCP", where,
            f"give {name} a static address (nmcli con mod <conn> ipv4.method manual "
            "ipv4.addresses <ip/prefix>, or BOOTPROTO=none + IPADDR in ifcfg, or netplan "
            "dhcp4: false + addresses), or `ddpnet tune`")


CHECKS: tuple[Check, ...] = (Selected(), SameSubnet(), Bridges(), Dhcp())
