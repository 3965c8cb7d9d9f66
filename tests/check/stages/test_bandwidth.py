"""The bandwidth judgement: only links that cross a NIC are compared (issue 18, item 11:
``make demo`` warned "check the switch ports" over loopback)."""

from __future__ import annotations

from ddpnet.check import tournament
from ddpnet.check.causes import Cause
from ddpnet.check.context import Findings
from ddpnet.check.registration import Registration
from ddpnet.check.stages.bandwidth import _judge


def _found(addresses: list[str]) -> Findings:
    roster = [Registration(rank=r, world_size=len(addresses), master_port=29500, host="vm",
                           address=a, interface="lo", pid=100 + r, uid=str(r))
              for r, a in enumerate(addresses)]
    return Findings(world=len(addresses), master="127.0.0.1:29500", roster=roster)


def _bw(n: int, slow: dict[tuple[int, int], float]) -> list[list[float | None]]:
    return [[None if i == j else slow.get((i, j), 8.0) for j in range(n)] for i in range(n)]


def test_one_host_over_loopback_raises_no_link_warning() -> None:
    found = _found(["127.0.0.1"] * 4)
    assert _judge(found, _bw(4, {(1, 2): 2.0, (3, 0): 1.5})) == []
    assert any("cross a NIC" in n for n in found.extra["notes"])


def test_one_host_by_its_nic_address_raises_no_link_warning() -> None:
    found = _found(["10.0.0.5"] * 4)
    assert _judge(found, _bw(4, {(3, j): 0.5 for j in range(3)})) == []


def test_two_hosts_judge_only_the_links_between_them() -> None:
    # ranks 0,1 on host A and 2,3 on host B; the slow same-host link 0->1 is not named,
    # the slow cross-host link 1->2 is
    found = _found(["198.18.0.1", "198.18.0.1", "198.18.0.2", "198.18.0.2"])
    (cause,) = _judge(found, _bw(4, {(0, 1): 0.5, (1, 2): 1.0}))
    assert cause.id == "slow-link" and cause.ranks == (1, 2)
    assert "0->1" not in cause.detail and "1->2" in cause.detail
    assert cause.hosts == ("vm (198.18.0.1)", "vm (198.18.0.2)")


def test_cross_nic_blanks_same_host_and_loopback_pairs() -> None:
    gbps, blanked = tournament.cross_nic(_bw(3, {}), ["10.0.0.1", "127.0.0.1", "10.0.0.2"])
    assert blanked == 4  # 0<->1 and 1<->2 involve loopback
    assert gbps[0][2] == 8.0 and gbps[2][0] == 8.0 and gbps[0][1] is None


def test_cause_names_each_host_once() -> None:
    cause = Cause(id="slow-link", detail="d", fix="f", hosts=("vm (127.0.0.1)",) * 2)
    assert cause.hosts == ("vm (127.0.0.1)",)
