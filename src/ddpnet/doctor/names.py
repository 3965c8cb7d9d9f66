"""names family: this host's name and MASTER_ADDR resolve to addresses other nodes can reach.

The classic Debian/Ubuntu ``127.0.1.1 <hostname>`` line in /etc/hosts makes gloo (which, when
GLOO_SOCKET_IFNAME is unset, binds the first address the hostname resolves to that it can
bind) advertise a loopback address: every other node then hangs connecting to it. The first
answer is what counts, not whether a cluster address follows it.
"""

from __future__ import annotations

import ipaddress

from ddpnet.doctor.base import Check, CheckResult, Host, Inputs, Status
from ddpnet.net import names
from ddpnet.net.names import hostname_address, hosts_fix, is_loopback
from ddpnet.net.resolver import Lookup, judge_lookups, parse_resolv_conf


def hosts_lines(host: Host, name: str) -> list[str]:
    """The /etc/hosts lines that mention ``name`` (for the detail and the fix)."""
    return names.hosts_lines(host.read(host.etc / "hosts") or "", name)


def hosts_fix_text(host: Host, inputs: Inputs, name: str) -> str:
    """The fix for a hostname on loopback: :func:`ddpnet.net.names.hosts_fix`, the rewrite
    ``ddpnet tune`` applies, mapping the name to a NIC's address (never the loopback one it
    has: on a single-host run the selected interface is ``lo``)."""
    ifaces = inputs.interfaces
    address, _ = hostname_address(ifaces, inputs.selected.address)  # type: ignore[arg-type]
    pin = "or export GLOO_SOCKET_IFNAME=<training interface>"
    content = host.read(host.etc / "hosts")
    if address is None:
        return (f"map {name} to this node's cluster address in /etc/hosts on every node "
                f"({pin})")
    fix = hosts_fix(content or "", name, address)
    if not fix.changes:  # the loopback answer does not come from /etc/hosts
        return f"add the line '{address} {name}' to /etc/hosts ({pin})"
    return f"in /etc/hosts: {fix.proposal} (sudo ddpnet tune --apply does this; {pin})"


def resolve(host: Host, name: str) -> tuple[list[str], str | None]:
    """Addresses (unique, in order) or the error text; one lookup per name per run."""

    def lookup() -> tuple[list[str], str | None]:
        try:
            return list(dict.fromkeys(host.resolve(name))), None
        except OSError as exc:
            return [], str(exc) or type(exc).__name__

    return host.memo.get(f"resolve:{name}", lookup)


class HostnameResolves(Check):
    id = "names.hostname"
    family = "names"
    title = "hostname resolves"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        name = host.hostname
        addrs, error = resolve(host, name)
        facts: dict[str, object] = {"hostname": name, "hostname_addresses": addrs}
        lines = hosts_lines(host, name)
        where = f" (/etc/hosts: {'; '.join(lines)})" if lines else ""
        if error is not None or not addrs:
            return self.fail(
                f"hostname {name} does not resolve", f"{error or 'no addresses'}",
                f"add '<this node's cluster address> {name}' to /etc/hosts on every node",
                hostname_loopback=False, **facts)
        loop = [a for a in addrs if is_loopback(a)]
        # gloo binds the first answer it can bind: a loopback first answer is what it uses
        first_loop = is_loopback(addrs[0])
        facts["hostname_loopback"] = first_loop
        ifname = host.environ.get("GLOO_SOCKET_IFNAME", "")
        detail = f"{name} -> {', '.join(addrs)}{where}"
        if first_loop:
            if ifname:
                return self.ok(f"{name} resolves first to loopback, but GLOO_SOCKET_IFNAME="
                               f"{ifname} pins gloo's interface", detail, **facts)
            only = "only " if len(loop) == len(addrs) else "first "
            fix = hosts_fix_text(host, inputs, name)
            why = ("; gloo without GLOO_SOCKET_IFNAME binds the first answer and advertises "
                   "it to every peer")
            if inputs.num_nodes <= 1 and is_loopback(inputs.master_addr):
                # a single-host run (MASTER_ADDR on loopback) works; a multi-node one hangs
                return self.warn(
                    f"hostname {name} resolves {only}to loopback ({addrs[0]}): fine on one "
                    "host, a multi-node job would hang", detail + why, fix, **facts)
            return self.fail(f"hostname {name} resolves {only}to loopback ({addrs[0]})",
                             detail + why, fix, **facts)
        if loop:
            return self.warn(
                f"hostname {name} also resolves to loopback ({', '.join(loop)})", detail,
                f"remove the loopback line for {name} from /etc/hosts", **facts)
        return self.ok(f"{name} -> {', '.join(addrs)}", where.strip(" ()"), **facts)


class MasterResolves(Check):
    id = "names.master"
    family = "names"
    title = "MASTER_ADDR resolves"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        name = inputs.master_addr
        addrs, error = resolve(host, name)
        if error is not None or not addrs:
            return self.fail(
                f"MASTER_ADDR {name} does not resolve on this node", error or "no addresses",
                f"use the rank-0 host's IP address as MASTER_ADDR, or add '<ip> {name}' to "
                "/etc/hosts on every node")
        families = {4 if ":" not in a else 6 for a in addrs}
        detail = f"{name} -> {', '.join(addrs)}"
        if inputs.num_nodes > 1 and all(is_loopback(a) for a in addrs):
            return self.fail(
                f"MASTER_ADDR {name} is loopback on a {inputs.num_nodes}-node job", detail,
                "set MASTER_ADDR to the rank-0 host's cluster address on every node")
        if len(families) > 1:
            return self.warn(
                f"MASTER_ADDR {name} resolves to both IPv4 and IPv6", detail,
                "use an IP address for MASTER_ADDR so every node connects the same way")
        if len(addrs) > 1:
            return self.warn(
                f"MASTER_ADDR {name} resolves to {len(addrs)} addresses", detail,
                "use one IP address for MASTER_ADDR; nodes may pick different ones")
        return self.ok(detail, master_addresses=addrs)


class ResolverSpeed(Check):
    """Time the lookups a job makes on this node through its own resolver (forward: the
    hostname gloo binds, a MASTER_ADDR name; reverse: MASTER_ADDR's address and this node's
    own, which torch's store looks up per connection) and name a slow or dead nameserver
    with what it costs init (``net.resolver``)."""

    id = "names.resolver"
    family = "names"
    title = "name lookups are fast"

    def run(self, host: Host, inputs: Inputs) -> CheckResult:
        forward = [host.hostname]
        reverse = [a for a in (inputs.selected.address,) if a]
        if _is_ip(inputs.master_addr):
            reverse.append(inputs.master_addr)
        else:
            forward.append(inputs.master_addr)
            reverse += resolve(host, inputs.master_addr)[0][:1]
        lookups = [lk for lk in host.lookups(forward, reverse) if isinstance(lk, Lookup)]
        if not lookups:
            return self.skip("no lookups timed")
        conf = parse_resolv_conf(host.read(host.etc / "resolv.conf") or "",
                                 str(host.etc / "resolv.conf"))
        facts = {"resolver": {**conf.to_dict(), "lookups": [lk.to_dict() for lk in lookups]}}
        found = judge_lookups(lookups, conf)
        if found is None:
            slowest = max(lookups, key=lambda lk: lk.seconds)
            return self.ok(f"{len(lookups)} lookups, slowest {slowest.seconds:.2f} s",
                           conf.describe(), **facts)
        summary = (f"name lookups {'fail' if found.severity == 'fail' else 'are slow'}: "
                   f"up to {found.per_lookup_s:.0f} s each")
        status: Status = "fail" if found.severity == "fail" else "warn"
        return self.result(status, summary, found.why(), found.fix(), facts)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return False
    return True


CHECKS: tuple[Check, ...] = (HostnameResolves(), MasterResolves(), ResolverSpeed())
