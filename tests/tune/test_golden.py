"""Golden files: the full plan (every file, command, note) per distribution and firewall.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/tune/test_golden.py``
and review the diff: these files are what users get on their nodes.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from ddpnet.tune.model import DISTROS, FIREWALLS, Plan
from ddpnet.tune.plan import build_plan
from tests.tune.fixtures import FACTS, request

GOLDEN = Path(__file__).parent / "golden"


def dump(plan: Plan) -> str:
    out: list[str] = []
    for part in plan.parts:
        out.append(f"===== part {part.name}")
        for f in part.files:
            out += [f"----- file {f.path} mode {oct(f.mode)}", f.content.rstrip("\n")]
        out += [f"apply: {shlex.join(c.argv)}"
                + (f"  [unless {shlex.join(c.unless)}]" if c.unless else "")
                + (f"  [onlyif {shlex.join(c.onlyif)}]" if c.onlyif else "") for c in part.apply]
        out += [f"revert: {shlex.join(c.argv)}" + (f"  [onlyif {shlex.join(c.onlyif)}]"
                                                   if c.onlyif else "") for c in part.revert]
        out += [f"touches: {t}" for t in part.touches]
        out += [f"note: {n}" for n in part.notes]
        out += [f"warning: {w}" for w in part.warnings]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("firewall", FIREWALLS)
@pytest.mark.parametrize("distro", DISTROS)
def test_golden(distro: str, firewall: str) -> None:
    text = dump(build_plan(request(distro, firewall), FACTS))
    path = GOLDEN / f"{distro}-{firewall}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text()


def test_every_distro_renders_its_own_static_ip_file() -> None:
    paths = {d: build_plan(request(d, "none"), FACTS).part("static-ip") for d in DISTROS}
    expect = {
        "rhel7": ("/etc/sysconfig/network-scripts/ifcfg-ens33", 0o644),
        "rhel8": ("/etc/NetworkManager/system-connections/ddpnet-ens33.nmconnection", 0o600),
        "rhel9": ("/etc/NetworkManager/system-connections/ddpnet-ens33.nmconnection", 0o600),
        "ubuntu": ("/etc/netplan/90-ddpnet.yaml", 0o600),
        "debian": ("/etc/network/interfaces.d/ddpnet-ens33", 0o644),
    }
    for distro, part in paths.items():
        assert part is not None and len(part.files) == 1
        assert (part.files[0].path, part.files[0].mode) == expect[distro]
        assert "9000" in part.files[0].content  # the interface's MTU is kept
