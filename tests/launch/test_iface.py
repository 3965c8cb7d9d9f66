"""launch's interface policy over the one selector: --ifname and the user's variables are
passed on unchecked (ranks may run elsewhere), the route's variables otherwise, and no
guess past it (torch picks)."""

from __future__ import annotations

import pytest

from ddpnet.errors import ConfigError
from ddpnet.launch import iface
from ddpnet.net import interfaces as interfaces_mod
from ddpnet.net import select as select_mod
from ddpnet.net.routes import Route
from tests.net.fixtures import LO, cfg
from tests.net.fixtures import iface as nic

ETH0 = nic("eth0", "198.18.0.3/24")


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interfaces_mod, "list_interfaces", lambda: (LO, ETH0))


def route_to(monkeypatch: pytest.MonkeyPatch, route: Route | None) -> None:
    def fake(c: object, env: object) -> select_mod.Selection:
        return select_mod.select(cfg(), (LO, ETH0), route, {})

    monkeypatch.setattr(select_mod, "select_for_host", fake)


def test_flag_is_not_checked_against_the_launching_host() -> None:
    c = iface.choose(None, {}, "ib7")
    assert (c.name, c.reason) == ("ib7", "--iface")
    assert set(c.env.values()) == {"ib7"} and len(c.env) == 3


def test_user_variables_are_forwarded_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    route_to(monkeypatch, Route("eth0", "198.18.0.3", None, dst="198.18.0.1"))
    c = iface.choose(None, {"NCCL_SOCKET_IFNAME": "=ib0", "GLOO_SOCKET_IFNAME": "ib0,ib1"})
    assert c.env == {"GLOO_SOCKET_IFNAME": "ib0,ib1", "NCCL_SOCKET_IFNAME": "=ib0"}
    assert c.name == "ib0" and "already set" in c.reason
    # an exclusion names no interface to pin mpirun to (was: docker0, the excluded one)
    c = iface.choose(None, {"NCCL_SOCKET_IFNAME": "^docker0,lo"})
    assert c.env == {"NCCL_SOCKET_IFNAME": "^docker0,lo"} and c.name is None


def test_route_toward_master(monkeypatch: pytest.MonkeyPatch) -> None:
    route_to(monkeypatch, Route("eth0", "198.18.0.3", None, dst="198.18.0.1"))
    c = iface.choose(cfg(), {})
    assert c.name == "eth0" and c.env["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert c.reason.startswith("routes to MASTER_ADDR 198.18.0.1")


def test_no_route_exports_nothing_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    route_to(monkeypatch, None)
    c = iface.choose(cfg(), {})
    assert (c.name, dict(c.env)) == (None, {})
    assert "no route to MASTER_ADDR" in c.reason and "the library picks" in c.reason


def test_selection_failure_does_not_block_a_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(c: object, env: object) -> object:
        raise ConfigError("RANK=-1 is negative", "fix it")

    monkeypatch.setattr(select_mod, "select_for_host", broken)
    c = iface.choose(None, {})
    assert c.name is None and "RANK=-1" in c.reason
