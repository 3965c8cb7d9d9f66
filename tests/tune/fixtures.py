"""Fixed host facts and requests shared by the tune tests (pure renderers, no host access)."""

from __future__ import annotations

from ddpnet.tune.model import HostFacts, TuneRequest
from ddpnet.tune.plan import build_request

HOSTS = "127.0.0.1 localhost\n127.0.1.1 node1.cluster node1\n::1 localhost ip6-localhost\n"

FACTS = HostFacts(
    hostname="node1.cluster",
    iface="ens33",
    iface_reason="--iface",
    address="10.0.0.11",
    mtu=9000,
    speed_mbps=25000,
    port_range=(32768, 60999),
    reserved_ports="8000-8010",
    sysctl_now={"net.core.somaxconn": "4096", "net.ipv4.tcp_fin_timeout": "60"},
    selinux_enforce="1",
    selinux_config="SELINUX=enforcing\nSELINUXTYPE=targeted\n",
    files={
        "/etc/hosts": HOSTS,
        "/etc/nftables.conf": "#!/usr/sbin/nft -f\nflush ruleset\n",
        "/etc/sysconfig/nftables.conf": "# Uncomment the include statement here\n",
        "/etc/sysconfig/network-scripts/ifcfg-ens33":
            'TYPE=Ethernet\nHWADDR=52:54:00:12:34:56\nUUID="5fb06bd0-0bb0-7ffb-45f1-d6edd65f3e03"\n'
            "BOOTPROTO=dhcp\n",
        "/etc/network/interfaces": "source /etc/network/interfaces.d/*\n\nauto lo\n"
                                   "iface lo inet loopback\n",
    },
)


def request(distro: str, firewall: str, **kw: object) -> TuneRequest:
    args: dict[str, object] = dict(
        distro=distro, firewall=firewall, profile="auto", master_port=29500,
        cluster_subnet="10.0.0.0/24", static_ip="10.0.0.11/24", gateway="10.0.0.1",
        dns="10.0.0.2,10.0.0.3", speed_mbps=FACTS.speed_mbps,
    )
    args.update(kw)
    return build_request(**args)  # type: ignore[arg-type]
