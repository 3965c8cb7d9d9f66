"""Assemble a :class:`TuneRequest` from flags and facts, and a :class:`Plan` from both (pure)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ddpnet.errors import ConfigError
from ddpnet.net.firewall import front_end
from ddpnet.tune import envfile, hosts, netconf, selinux, sysctl
from ddpnet.tune import firewall as fw
from ddpnet.tune.detect import detect_distro
from ddpnet.tune.model import HostFacts, Plan, TuneRequest
from ddpnet.tune.validate import (
    parse_dns,
    parse_port,
    parse_port_range,
    parse_static_ip,
    parse_subnet,
)


def build_request(
    *,
    distro: str = "auto",
    firewall: str = "auto",
    profile: str = "auto",
    master_port: str | int = 29500,
    cluster_subnet: str | None = None,
    port_range: str | None = None,
    static_ip: str | None = None,
    gateway: str | None = None,
    dns: str | None = None,
    zone: str = "public",
    os_release: str | None = None,
    os_release_path: str = "/etc/os-release",
    firewall_active: Mapping[str, bool] | None = None,
    speed_mbps: int | None = None,
) -> TuneRequest:
    sources: dict[str, str] = {}
    if distro == "auto":
        distro, sources["distro"] = detect_distro(os_release, os_release_path)
    else:
        sources["distro"] = "--distro"
    if firewall == "auto":
        firewall, sources["firewall"] = front_end(firewall_active or {})
    else:
        sources["firewall"] = "--firewall"
    if profile == "auto":
        profile, sources["profile"] = sysctl.profile_for_speed(speed_mbps)
    else:
        sources["profile"] = "--profile"
    port = parse_port(master_port)
    subnet = parse_subnet(cluster_subnet) if cluster_subnet else None
    if firewall != "none" and subnet is None:
        raise ConfigError(
            f"--cluster-subnet is required with firewall {firewall} "
            f"({sources['firewall']}): ddpnet opens the training ports only to the cluster",
            "add --cluster-subnet CIDR (the nodes' network, e.g. 10.0.0.0/24)")
    if static_ip is None and (gateway or dns):
        raise ConfigError("--gateway/--dns given without --static-ip",
                          "add --static-ip ADDRESS/PREFIX, or drop --gateway/--dns")
    ip = parse_static_ip(static_ip, gateway) if static_ip else None
    if ip is not None and subnet is not None and ip.version != subnet.version:
        raise ConfigError(f"--static-ip {ip} and --cluster-subnet {subnet} are different "
                          "IP versions", "use one family for both")
    servers = parse_dns(dns)
    if ip is not None:
        wrong = [d for d in servers if ipaddress.ip_address(d).version != ip.version]
        if wrong:
            raise ConfigError(f"--dns {','.join(wrong)}: not IPv{ip.version} like --static-ip "
                              f"{ip}", f"give IPv{ip.version} DNS servers for this address")
    return TuneRequest(
        distro=distro, firewall=firewall, profile=profile, master_port=port,
        cluster_subnet=subnet,
        port_range=parse_port_range(port_range) if port_range else None,
        static_ip=ip, gateway=gateway, dns=servers, zone=zone, sources=sources,
    )


def build_plan(req: TuneRequest, facts: HostFacts) -> Plan:
    spec = fw.spec_for(req, facts) if req.firewall != "none" else None
    parts = (
        sysctl.render(req, facts),
        fw.render(req, facts),
        selinux.render(req, facts, spec),
        netconf.render(req, facts),
        hosts.render(req, facts),
        envfile.render(req, facts),
    )
    return Plan(request=req, facts=facts, parts=parts)


#: cloud-init's configuration: it may rewrite /etc/hosts and the network config at boot
CLOUD_CFG = "/etc/cloud/cloud.cfg"


def files_to_read(distro: str, iface: str) -> tuple[str, ...]:
    """Existing files the renderers edit or look at, for :mod:`ddpnet.tune.facts`."""
    from ddpnet.tune.firewall import nftables, ufw
    from ddpnet.tune.netconf import ifcfg, ifupdown

    return (hosts.PATH, nftables.main_conf(distro), ifcfg.path_for(iface), ifupdown.MAIN,
            CLOUD_CFG, ufw.DEFAULTS)
