"""selinux family: modes and AVC denials on the training ports; never 'disable it'."""

from __future__ import annotations

from pathlib import Path

from ddpnet.doctor import selinux
from tests.doctor.helpers import Tree, inputs

AVC = ('type=AVC msg=audit(1700000000.123:456): avc:  denied  { name_bind } for  pid=4242 '
       'comm="python" src=29500 scontext=system_u:system_r:unconfined_service_t:s0 '
       'tcontext=system_u:object_r:unreserved_port_t:s0 tclass=tcp_socket permissive=0\n')
OTHER = AVC.replace("src=29500", "src=8080")


def run(tree: Tree) -> object:
    return selinux.Mode().run(tree.host(), inputs())


def test_absent_disabled_permissive(tmp_path: Path) -> None:
    r = selinux.Mode().run(Tree(tmp_path).host(), inputs())
    assert r.status == "skip" and r.facts["selinux"] == "absent"
    tree = Tree(tmp_path / "d")
    tree.write("etc/selinux/config", "# a comment\nSELINUX=disabled\n")
    assert selinux.Mode().run(tree.host(), inputs()).facts["selinux"] == "disabled"
    tree = Tree(tmp_path / "p")
    tree.write("sys/fs/selinux/enforce", "0")
    r = selinux.Mode().run(tree.host(), inputs())
    assert r.status == "pass" and r.summary == "SELinux permissive"


def test_enforcing_without_denials_passes(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.write("sys/fs/selinux/enforce", "1")
    tree.write("var/log/audit/audit.log", OTHER)
    r = selinux.Mode().run(tree.host(), inputs())
    assert r.status == "pass" and "enforcing" in r.summary


def test_enforcing_with_port_denial_fails_with_specific_fix(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    tree.write("sys/fs/selinux/enforce", "1")
    tree.write("var/log/audit/audit.log", OTHER + AVC)
    r = selinux.Mode().run(tree.host(), inputs())
    assert r.status == "fail" and r.detail == ("python (unconfined_service_t) was denied "
                                               "name_bind on tcp port 29500 "
                                               "(unreserved_port_t)")
    assert "semanage port -a -t unreserved_port_t -p tcp 29500" in r.fix
    assert "audit2allow" in r.fix
    assert "disable" not in r.fix.lower() and "setenforce" not in r.fix
