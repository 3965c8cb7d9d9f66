"""Static IP renderers, one per network stack: ifcfg (rhel7), a NetworkManager keyfile plus
the equivalent nmcli (rhel8/9), netplan (ubuntu), ifupdown (debian).

They write the configuration and never bring the interface down and up themselves: the
address may be the one this SSH session runs over. The activation command, with a rollback
where the stack has one (``netplan try``), is printed for the user.
"""

from __future__ import annotations

import importlib

from ddpnet.tune.model import HostFacts, Part, TuneRequest

#: distro -> renderer module
RENDERERS: dict[str, str] = {
    "rhel7": "ddpnet.tune.netconf.ifcfg",
    "rhel8": "ddpnet.tune.netconf.nm",
    "rhel9": "ddpnet.tune.netconf.nm",
    "ubuntu": "ddpnet.tune.netconf.netplan",
    "debian": "ddpnet.tune.netconf.ifupdown",
}


def common_warnings(req: TuneRequest, facts: HostFacts) -> tuple[str, ...]:
    out: list[str] = []
    ip = req.static_ip
    if ip is not None and req.cluster_subnet is not None and ip.ip not in req.cluster_subnet:
        out.append(f"static address {ip.ip} is not in the cluster subnet {req.cluster_subnet}: "
                   "the firewall rules will not admit this node's peers' view of it")
    if facts.mtu is None:
        out.append(f"MTU of {facts.iface} unknown: not set in the static configuration")
    return tuple(out)


def render(req: TuneRequest, facts: HostFacts) -> Part:
    if req.static_ip is None:
        return Part(name="static-ip", notes=("no --static-ip: network configuration untouched",))
    module = importlib.import_module(RENDERERS[req.distro])
    part: Part = module.render(req, facts)
    return part
