"""``ddpnet tune --apply`` / ``--revert`` on the live root ``/`` for real, inside a private
sandbox: new mount, network and UTS namespaces, /etc as an overlay (writes never reach the
machine's /etc), an empty /var/lib, a veth pair as the cluster interface. The commands really
run: the sysctl drop-in loads (per-namespace keys), nft loads ``table inet ddpnet``; revert
unloads them and leaves /etc byte-identical."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import clean_environ
from tests.lab_util import requires_netns

pytestmark = [requires_netns, pytest.mark.root]

ARGS = ("--distro debian --firewall nftables --cluster-subnet 198.18.5.0/24 "
        "--master-port 29511 --iface tn0 --profile 10g")

PRELUDE = textwrap.dedent("""
    set -eu
    T={tmp}
    mkdir -p $T/upper $T/work $T/varlib $T/out
    mount -t overlay overlay -o lowerdir=/etc,upperdir=$T/upper,workdir=$T/work /etc
    mount --bind $T/varlib /var/lib
    ip link set lo up
    ip link add tn0 type veth peer name tn1
    ip addr add 198.18.5.2/24 dev tn0
    ip link set tn1 up
    ip link set tn0 up
    hostname tnnode
    printf '127.0.0.1 localhost\\n127.0.1.1 tnnode\\n' > /etc/hosts
    state() {{
        # /etc/netns changes under us: other tests' labs live there
        (cd /etc && find . -xdev -path ./netns -prune -o -type f -readable -print0 \\
            | sort -z | xargs -0 sha256sum) > $T/out/$1.etc
        (cd /etc && find . -xdev -path ./netns -prune -o -printf '%p %m %U %G\\n' \\
            | sort) > $T/out/$1.meta
        sysctl -n net.ipv4.tcp_fin_timeout net.ipv4.ip_local_reserved_ports \\
            net.ipv4.tcp_rmem > $T/out/$1.sysctl
        nft list ruleset > $T/out/$1.nft
        find /var/lib > $T/out/$1.varlib
    }}
""")

SCRIPT = PRELUDE + textwrap.dedent("""
    state before
    {py} -m ddpnet tune {args} --apply --json > $T/out/apply1.json
    state applied
    {py} -m ddpnet tune {args} --apply --json > $T/out/apply2.json
    getent hosts tnnode > $T/out/resolved || true
    {py} -m ddpnet tune --distro debian --cluster-subnet 198.18.5.0/24 --master-port 29511 \\
        --profile 10g --iface tn0 --json > $T/out/auto.json
    {py} -m ddpnet tune --revert --json > $T/out/revert.json
    state reverted
""")

UFW_SCRIPT = PRELUDE + textwrap.dedent("""
    ufw --force enable > /dev/null
    state before
    {py} -m ddpnet tune --distro ubuntu --firewall ufw --cluster-subnet 198.18.5.0/24 \\
        --iface tn0 --apply --json > $T/out/apply.json
    iptables -S ufw-user-input > $T/out/applied.rules
    state applied
    {py} -m ddpnet tune --revert --json > $T/out/revert.json
    iptables -S ufw-user-input > $T/out/reverted.rules
    state reverted
""")


def sandbox(script: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["unshare", "--mount", "--net", "--uts", "--propagation", "private",
                           "bash", "-c", script], capture_output=True, text=True, timeout=240,
                          env=clean_environ(), cwd=os.getcwd())
    if proc.returncode != 0 and "overlay" in proc.stderr:
        pytest.skip(f"no overlayfs here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_live_apply_and_revert_in_a_sandbox(tmp_path: Path) -> None:
    sandbox(SCRIPT.format(tmp=tmp_path, py=sys.executable, args=ARGS))
    out = tmp_path / "out"

    def read(name: str) -> str:
        return (out / name).read_text()

    first = json.loads(read("apply1.json"))["outcome"]
    assert not first["failed"]
    ran = {" ".join(c["argv"]): c["status"] for c in first["commands"]}
    assert ran["nft -f /etc/ddpnet/firewall.nft"] == "ran"
    assert ran["sysctl -q -e -p /etc/sysctl.d/90-ddpnet.conf"] == "ran"
    assert "table inet ddpnet" in read("applied.nft")
    assert ("ip saddr 198.18.5.0/24 tcp dport { 29400, 29511, 32768-60999 } accept"
            in read("applied.nft"))
    fin, reserved, rmem = read("applied.sysctl").splitlines()
    assert fin == "30" and reserved == "29400,29511" and rmem.split()[2] == str(64 * 2**20)
    assert "198.18.5.2" in read("resolved")  # the hosts fix: gloo now resolves a real address

    # host-wide keys cannot be set from a namespace: reported, not hidden by `sysctl -e`
    not_taken = json.loads(read("apply1.json"))["sysctl_not_taken"]
    assert any(m.startswith("net.core.netdev_max_backlog") for m in not_taken), not_taken
    assert not any("tcp_rmem" in m or "somaxconn" in m for m in not_taken), not_taken
    second = json.loads(read("apply2.json"))["outcome"]
    assert second["changed"] is False and not second["failed"]

    # --firewall auto after an apply: our own table is not "an active firewall", but the
    # journal says what was applied, so a re-run renders the same (no diff)
    auto = json.loads(read("auto.json"))
    assert auto["request"]["firewall"] == "nftables", auto["request"]
    assert "journal" in auto["request"]["sources"]["firewall"]
    changed = {f["path"]: f["diff"] for f in auto["files"] if f["action"] != "unchanged"}
    assert changed == {}, changed

    revert = json.loads(read("revert.json"))["outcome"]
    assert not revert["failed"]
    for name in ("etc", "meta", "sysctl", "nft", "varlib"):
        assert read(f"reverted.{name}") == read(f"before.{name}"), name
    assert read("applied.etc") != read("before.etc")  # the comparison can fail


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ufw") is None,
                    reason="needs unshare and ufw")
def test_live_ufw_rules_added_and_deleted_in_a_sandbox(tmp_path: Path) -> None:
    """ufw's own `allow`/`delete allow` really run; the rules ufw writes are removed and its
    user.rules files come back byte for byte."""
    sandbox(UFW_SCRIPT.format(tmp=tmp_path, py=sys.executable))
    out = tmp_path / "out"
    applied = (out / "applied.rules").read_text()
    for port in ("--dport 29500", "--dport 29400", "--dports 32768:60999"):
        assert any(port in line and "-s 198.18.5.0/24" in line and "ACCEPT" in line
                   for line in applied.splitlines()), (port, applied)
    assert "198.18.5.0/24" not in (out / "reverted.rules").read_text()
    assert not json.loads((out / "revert.json").read_text())["outcome"]["failed"]
    for name in ("etc", "meta", "sysctl", "varlib"):
        assert (out / f"reverted.{name}").read_text() == (out / f"before.{name}").read_text()
