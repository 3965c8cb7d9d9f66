"""Judging registrations (pure) and the registration protocol over a real TCPStore."""

from __future__ import annotations

from ddpnet.check.registration import Registration, judge_registrations


def _reg(rank: int, world: int = 4, port: int = 29500, host: str = "", uid: str = ""
         ) -> Registration:
    host = host or f"n{rank}"
    return Registration(rank=rank, world_size=world, master_port=port, host=host,
                        address=f"10.0.0.{rank + 1}", interface="eth0", pid=100 + rank,
                        uid=uid or f"u{rank}{host}")


def test_everyone_present() -> None:
    regs = [_reg(r) for r in range(4)]
    v = judge_registrations(regs[0], regs, waited_s=0.1)
    assert v.ok and [r.rank for r in v.roster] == [0, 1, 2, 3]


def test_missing_ranks_named_with_the_hosts_that_came() -> None:
    regs = [_reg(0), _reg(1), _reg(3)]
    v = judge_registrations(regs[0], regs, waited_s=10)
    (cause,) = v.causes
    assert cause.id == "missing-ranks" and cause.ranks == (2,) and v.missing == (2,)
    assert "n3 (10.0.0.4)" in cause.detail and "10.0 s" in cause.detail


def test_duplicate_rank_names_both_hosts_and_the_missing_one() -> None:
    regs = [_reg(0), _reg(1), _reg(1, host="n2"), _reg(3)]
    v = judge_registrations(regs[0], regs, waited_s=1)
    ids = [c.id for c in v.causes]
    assert ids == ["duplicate-rank", "missing-ranks"]
    dup = v.causes[0]
    assert dup.ranks == (1,) and len(dup.hosts) == 2
    assert any("n2" in h for h in dup.hosts) and v.missing == (2,)
    # the roster keeps the first arrival of the duplicated rank
    assert [r.host for r in v.roster] == ["n0", "n1", "n3"]


def test_world_size_and_port_mismatch() -> None:
    regs = [_reg(0), _reg(1), _reg(2, world=8), _reg(3, port=29501)]
    v = judge_registrations(regs[0], regs, waited_s=1)
    by_id = {c.id: c for c in v.causes}
    assert by_id["world-size-mismatch"].ranks == (2,)
    assert "WORLD_SIZE=8" in by_id["world-size-mismatch"].detail
    assert by_id["master-port-mismatch"].ranks == (3,)
    assert "export MASTER_PORT=29500" in by_id["master-port-mismatch"].fix


def test_rank_beyond_the_world_is_named() -> None:
    regs = [_reg(0, world=2), _reg(1, world=2), _reg(5, world=2)]
    v = judge_registrations(regs[0], regs, waited_s=1)
    assert [c.id for c in v.causes] == ["world-size-mismatch"]
    assert v.causes[0].ranks == (5,)


def test_registration_round_trips_through_json() -> None:
    reg = _reg(2)
    assert Registration.from_json(reg.to_json()) == reg


def test_missing_ranks_among_4096_is_a_short_line_that_names_every_rank() -> None:
    own = _reg(0, world=4096)
    arrivals = [own, *(_reg(r, world=4096) for r in range(1, 4096)
                       if r not in (1722, 3001, 3002))]
    verdict = judge_registrations(own, arrivals, waited_s=102.4)
    [cause] = verdict.causes
    assert "rank(s) 1722, 3001-3002; joined: rank(s) 0-1721, 1723-3000, 3003-4095 on " \
        "4093 hosts" in cause.detail
    assert len(cause.detail) < 300  # every rank read it in the plan: O(N) each was O(N^2)
