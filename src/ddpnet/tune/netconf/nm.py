"""rhel8/9: a NetworkManager keyfile (mode 0600, NM ignores others) plus the equivalent nmcli
command for people who prefer it."""

from __future__ import annotations

import configparser
import shlex
import uuid

from ddpnet.tune.model import FileChange, HostFacts, Part, TuneRequest
from ddpnet.tune.netconf import Configured, as_mtu, common_warnings


def con_name(iface: str) -> str:
    return f"ddpnet-{iface}"


def path_for(iface: str) -> str:
    return f"/etc/NetworkManager/system-connections/{con_name(iface)}.nmconnection"


def read_config(text: str, iface: str) -> Configured | None:
    """The static addresses and MTU a keyfile bound to ``iface`` gives (pure)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if parser.get("connection", "interface-name", fallback=None) != iface:
        return None
    addrs = [value.split(",")[0].strip()
             for fam in ("ipv4", "ipv6") if parser.has_section(fam)
             for key, value in parser.items(fam) if key.startswith("address")]
    return Configured(tuple(a for a in addrs if a),
                      as_mtu(parser.get("ethernet", "mtu", fallback=None)))


def render_keyfile(req: TuneRequest, facts: HostFacts) -> str:
    assert req.static_ip is not None
    ip = req.static_ip
    fam = f"ipv{ip.version}"
    other = "ipv6" if ip.version == 4 else "ipv4"
    addr = f"{ip}" + (f",{req.gateway}" if req.gateway else "")
    lines = [
        "# Written by `ddpnet tune` (static address for training traffic).",
        "[connection]",
        f"id={con_name(facts.iface)}",
        f"uuid={uuid.uuid5(uuid.NAMESPACE_URL, 'ddpnet:' + facts.iface)}",
        "type=ethernet",
        f"interface-name={facts.iface}",
        "autoconnect=true",
        "autoconnect-priority=10",
        "",
        "[ethernet]",
    ]
    if facts.mtu:
        lines.append(f"mtu={facts.mtu}")
    lines += ["", f"[{fam}]", "method=manual", f"address1={addr}"]
    if req.dns:
        lines.append("dns=" + "".join(f"{d};" for d in req.dns))
    lines += ["", f"[{other}]", "method=ignore" if other == "ipv6" else "method=disabled", ""]
    return "\n".join(lines)


def nmcli_argv(req: TuneRequest, facts: HostFacts) -> tuple[str, ...]:
    assert req.static_ip is not None
    fam = f"ipv{req.static_ip.version}"
    other = ("ipv6", "ignore") if fam == "ipv4" else ("ipv4", "disabled")
    argv = ["nmcli", "connection", "add", "type", "ethernet", "con-name",
            con_name(facts.iface), "ifname", facts.iface, "connection.autoconnect-priority",
            "10", f"{fam}.method", "manual", f"{fam}.addresses", str(req.static_ip)]
    if req.gateway:
        argv += [f"{fam}.gateway", req.gateway]
    if req.dns:
        argv += [f"{fam}.dns", ",".join(req.dns)]
    if facts.mtu:
        argv += ["802-3-ethernet.mtu", str(facts.mtu)]
    argv += [f"{other[0]}.method", other[1]]
    return tuple(argv)


def render(req: TuneRequest, facts: HostFacts) -> Part:
    path = path_for(facts.iface)
    return Part(
        name="static-ip",
        files=(FileChange(path, render_keyfile(req, facts), 0o600,
                          f"static {req.static_ip} on {facts.iface}"),),
        notes=(
            "equivalent: " + shlex.join(nmcli_argv(req, facts)),
            f"activate (from a console, not over {facts.iface}): nmcli connection reload && "
            f"nmcli connection up {con_name(facts.iface)}",
        ),
        warnings=common_warnings(req, facts),
    )
