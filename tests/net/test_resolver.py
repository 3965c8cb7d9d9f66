"""The node's resolver: resolv.conf parsed, lookups timed (bounded), a slow or dead one
judged with what it costs init; a warning when it slows, a failure when it breaks."""

from __future__ import annotations

from ddpnet.net.resolver import (
    Lookup,
    ResolvConf,
    judge_lookups,
    parse_resolv_conf,
    time_lookups,
)


def test_parse_resolv_conf() -> None:
    conf = parse_resolv_conf("# c\nnameserver 198.18.0.253\nnameserver 198.18.0.254 # x\n"
                             "search lab\noptions ndots:2 timeout:3 attempts:1\n"
                             "nameserver a\nnameserver b\n", "/etc/netns/x/resolv.conf")
    assert conf.nameservers == ("198.18.0.253", "198.18.0.254", "a")  # glibc reads three
    assert (conf.timeout_s, conf.attempts) == (3.0, 1)
    assert conf.failure_s == 9.0
    assert conf.describe().startswith("nameserver 198.18.0.253, 198.18.0.254, a in "
                                      "/etc/netns/x/resolv.conf (timeout 3 s, attempts 1)")
    default = parse_resolv_conf("options timeout:99 attempts:0\n")
    assert (default.timeout_s, default.attempts, default.failure_s) == (30.0, 1, 30.0)
    assert parse_resolv_conf("").failure_s == 10.0  # glibc's 5 s x 2 tries, 127.0.0.1


def test_judge_warns_on_slow_reverse_and_fails_on_unanswered_forward() -> None:
    conf = ResolvConf(("198.18.0.253",), 5.0, 2)
    fast = Lookup("reverse", "198.18.0.1", 0.01, "n0")
    assert judge_lookups([fast], conf) is None
    slow = judge_lookups([fast, Lookup("reverse", "198.18.0.2", 3.0, answered=False)], conf)
    assert slow is not None and slow.severity == "warn" and slow.per_lookup_s == 10.0
    assert "does not answer" in slow.why() and "err=-3" in slow.why()
    assert "reverse lookup of 198.18.0.2 took over 3.0 s (no answer)" in slow.why()
    assert "'198.18.0.2 n1'" in slow.fix([("198.18.0.2", "n1")])
    answered = judge_lookups([Lookup("reverse", "198.18.0.2", 4.2, "", "[Errno -3] x")], conf)
    assert answered is not None and answered.per_lookup_s == 4.2
    assert "answers slowly" in answered.why()
    broken = judge_lookups([Lookup("forward", "n0", 3.0, answered=False)], conf)
    assert broken is not None and broken.severity == "fail"
    assert "cannot resolve it" in broken.why()


def test_lookup_round_trips_and_rejects_junk() -> None:
    lk = Lookup("forward", "n0", 0.5, "198.18.0.1")
    assert Lookup.from_dict(lk.to_dict()) == lk
    assert Lookup.from_dict({"kind": "x"}) is None and Lookup.from_dict("junk") is None


def test_time_lookups_is_bounded_and_answers_from_the_hosts_file() -> None:
    got = time_lookups(forward=["localhost"], reverse=["127.0.0.1"], bound=5.0)
    assert [lk.kind for lk in got] == ["forward", "reverse"]
    assert got[0].answered and "127.0.0.1" in got[0].answer
    assert got[1].answered
