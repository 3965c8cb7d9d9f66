"""sysctl family and the profile ``tune`` imports."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpnet.doctor import sysctl
from ddpnet.sysctl_profile import INT_MAX, TIERS, GiB, MiB, profile_for, profile_of
from tests.doctor.helpers import ETH0, GOOD_SYSCTLS, LO, Iface, Tree, inputs


@pytest.mark.parametrize(("speed", "tier", "core", "auto"), [
    (None, "guide", 16 * MiB, 16 * MiB), (1000, "guide", 16 * MiB, 16 * MiB),
    (9999, "guide", 16 * MiB, 16 * MiB), (10000, "10g", 64 * MiB, 64 * MiB),
    (25000, "10g", 64 * MiB, 64 * MiB), (40000, "40g", 128 * MiB, 128 * MiB),
    (100000, "100g", INT_MAX, GiB), (400000, "100g", INT_MAX, GiB),
])
def test_profile_scales_with_link_speed(speed: int | None, tier: str, core: int,
                                        auto: int) -> None:
    p = profile_for(speed)
    assert p.tier == tier and p.buffer_max == core
    assert p.targets["net.core.rmem_max"].value == core
    assert p.targets["net.ipv4.tcp_rmem"].value == auto
    assert p.targets["net.ipv4.tcp_rmem"].recommended == f"4096 131072 {auto}"
    assert f"net.core.wmem_max = {core}" in p.sysctl_d()


def test_every_tier_has_the_checked_keys_and_a_reason_for_each_value() -> None:
    """doctor builds one check per key once, so the checked keys must not vary by tier."""
    for tier in TIERS:
        p = profile_of(tier)
        assert tuple(p.checked) == sysctl.KEYS, tier.name
        assert all(t.why and t.satisfied_by(t.recommended) for t in p.targets.values())
    assert tuple(profile_for(10000).targets)[-2:] == ("net.ipv4.tcp_mtu_probing",
                                                      "net.core.netdev_max_backlog")
    assert "net.ipv4.tcp_mtu_probing" not in profile_for(1000).targets


def test_profile_fin_timeout_is_a_maximum() -> None:
    t = profile_for(1000).targets["net.ipv4.tcp_fin_timeout"]
    assert t.satisfied_by("15") and not t.satisfied_by("60") and t.satisfied_by("x") is None


def results(tmp_path: Path, values: dict[str, str], speed: int | None = 10000) -> dict:
    tree = Tree(tmp_path)
    tree.sysctls(values)
    eth = Iface("eth0", addresses=ETH0.addresses, speed_mbps=speed)
    inp = inputs(interfaces=(LO, eth))
    return {c.key: c.run(tree.host(), inp) for c in sysctl.CHECKS}  # type: ignore[attr-defined]


def test_tuned_node_passes(tmp_path: Path) -> None:
    r = results(tmp_path, GOOD_SYSCTLS)
    assert {k: v.status for k, v in r.items()} == dict.fromkeys(sysctl.KEYS, "pass")
    assert r["net.ipv4.tcp_rmem"].facts["sysctl"] == {"net.ipv4.tcp_rmem": "4096 131072 67108864"}


def test_defaults_warn_with_exact_fix(tmp_path: Path) -> None:
    values = dict(GOOD_SYSCTLS, **{"net.core.rmem_max": "212992",
                                   "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
                                   "net.ipv4.tcp_fin_timeout": "60"})
    r = results(tmp_path, values)
    assert r["net.core.rmem_max"].status == "warn"
    assert r["net.core.rmem_max"].summary == "net.core.rmem_max = 212992, want at least 67108864"
    assert r["net.core.rmem_max"].fix.startswith("sysctl -w net.core.rmem_max=67108864 ;")
    assert "/etc/sysctl.d/90-ddpnet.conf" in r["net.core.rmem_max"].fix
    assert "sysctl -w net.ipv4.tcp_wmem='4096 65536 67108864'" in r["net.ipv4.tcp_wmem"].fix
    assert r["net.ipv4.tcp_fin_timeout"].summary.endswith("want at most 30")
    assert r["net.core.somaxconn"].status == "pass"


def test_slow_link_accepts_the_16_mib_floor(tmp_path: Path) -> None:
    values = dict(GOOD_SYSCTLS, **{"net.core.rmem_max": str(16 * MiB)})
    assert results(tmp_path, values, speed=1000)["net.core.rmem_max"].status == "pass"
    assert results(tmp_path / "b", values, speed=10000)["net.core.rmem_max"].status == "warn"


def test_missing_key_skips(tmp_path: Path) -> None:
    r = results(tmp_path, {})
    assert r["net.core.rmem_max"].status == "skip"
