"""The path-MTU probe a rank > 0 makes to rank 0 before it joins."""

from __future__ import annotations

import errno
from types import SimpleNamespace
from typing import Any

import pytest

from ddpnet.check import pmtu
from ddpnet.check.stages import pathmtu


def test_rank_0_advertising_an_address_without_a_route_is_not_probed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 0 behind a port forward: its own address is unroutable from here; the mesh names
    # that, the probe must not crash the rank (it raised ENETUNREACH as a traceback)
    def unreachable(*args: Any, **kwargs: Any) -> pmtu.PeerMtu:
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(pmtu, "probe_peer", unreachable)
    monkeypatch.setattr(pathmtu, "interface_mtu", lambda name: 1500)
    store = SimpleNamespace(get=lambda key, timeout: ["198.19.1.2", 40000, 1500])
    ctx: Any = SimpleNamespace(store=store, sel=SimpleNamespace(interface="eth0"),
                               address="198.18.0.2")
    assert pathmtu.probe_master(ctx) is None
