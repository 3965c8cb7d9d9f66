"""Fixture interface tables and configs for the pure selection tests."""

from __future__ import annotations

from types import MappingProxyType

from ddpnet.config import DistConfig
from ddpnet.net.interfaces import Address, Interface


def iface(name: str, *addrs: str, up: bool = True, kind: str = "physical",
          mtu: int = 1500) -> Interface:
    parsed = []
    for a in addrs:
        ip, _, prefix = a.partition("/")
        family = 6 if ":" in ip else 4
        parsed.append(Address(ip, int(prefix or (128 if family == 6 else 32)), family))
    return Interface(name, up, tuple(parsed), mtu, None, kind)


LO = iface("lo", "127.0.0.1/8", "::1/128", kind="loopback", mtu=65536)


def cfg(master: str = "198.18.0.1", *, rank: int = 1, world: int = 4, nodes: int = 4,
        num_nodes_source: str = "NNODES", master_source: str = "MASTER_ADDR",
        init_method: str = "env://", port: int = 29500) -> DistConfig:
    lws = world // nodes
    return DistConfig(
        launcher="manual", rank=rank, world_size=world, local_rank=rank % lws,
        local_world_size=lws, node_rank=rank // lws, num_nodes=nodes, master_addr=master,
        master_port=port, init_method=init_method,
        sources=MappingProxyType({"num_nodes": num_nodes_source,
                                  "master_addr": master_source}),
    )
