"""Firewall renderers, one module per firewall: open MASTER_PORT, the rendezvous port and the
ephemeral range gloo/NCCL listen on, **only from the cluster subnet**. Never 0.0.0.0/0 and
never "disable the firewall": the TCPStore on MASTER_PORT is unauthenticated."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from ddpnet.tune.model import RDZV_PORT, HostFacts, IPNetwork, Part, TuneRequest

#: firewall name -> module with ``render(spec, req, facts) -> Part``
RENDERERS: dict[str, str] = {
    "firewalld": "ddpnet.tune.firewall.firewalld",
    "nftables": "ddpnet.tune.firewall.nftables",
    "iptables": "ddpnet.tune.firewall.iptables",
    "ufw": "ddpnet.tune.firewall.ufw",
}


@dataclass(frozen=True)
class PortSpec:
    """The ports to open and who may reach them."""

    subnet: IPNetwork
    master_port: int
    rdzv_port: int
    ephemeral: tuple[int, int]

    @property
    def family(self) -> int:
        return self.subnet.version

    def ranges(self) -> tuple[tuple[int, int, str], ...]:
        """(lo, hi, what), leaving out a port another item already covers, stable order."""
        items = (
            (self.master_port, self.master_port, "MASTER_PORT (TCPStore)"),
            (self.rdzv_port, self.rdzv_port, "torchrun c10d rendezvous"),
            (self.ephemeral[0], self.ephemeral[1], "ephemeral range gloo/NCCL listen on"),
        )
        out: list[tuple[int, int, str]] = []
        for i, (lo, hi, what) in enumerate(items):
            covered = any((a <= lo and hi <= b and (a, b) != (lo, hi)) or
                          ((a, b) == (lo, hi) and j < i)
                          for j, (a, b, _) in enumerate(items) if j != i)
            if not covered:
                out.append((lo, hi, what))
        return tuple(out)


def spec_for(req: TuneRequest, facts: HostFacts) -> PortSpec:
    assert req.cluster_subnet is not None  # validate() requires it when a firewall is chosen
    return PortSpec(req.cluster_subnet, req.master_port, RDZV_PORT,
                    req.port_range or facts.port_range)


def render(req: TuneRequest, facts: HostFacts) -> Part:
    if req.firewall == "none":
        return Part(name="firewall", notes=(
            "no active firewall: MASTER_PORT is reachable from anywhere that routes here; "
            "the TCPStore is unauthenticated, so prefer --firewall nftables "
            "--cluster-subnet CIDR",))
    module = importlib.import_module(RENDERERS[req.firewall])
    part: Part = module.render(spec_for(req, facts), req, facts)
    return part
