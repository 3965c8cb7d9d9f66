"""The preflight: the pure classifier, the retry loop on a fake clock, and the real thing
against sockets on loopback (refused, in use, connected, unresolvable)."""

from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

from ddpnet.errors import RendezvousError
from ddpnet.net.ports import free_port
from ddpnet.net.probe import (
    CONNECTED,
    REFUSED,
    RESET,
    TIMEOUT,
    UNREACHABLE,
    Attempt,
    classify_bind,
    classify_connect,
    connect_loop,
    name_source,
    outcome_of,
    preflight,
    retry_delay,
)
from tests.net.fixtures import cfg


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (None, CONNECTED),
        (TimeoutError("timed out"), TIMEOUT),
        (TimeoutError(), TIMEOUT),
        (OSError(errno.ECONNREFUSED, "refused"), REFUSED),
        (OSError(errno.EHOSTUNREACH, "no route"), UNREACHABLE),
        (OSError(errno.ENETUNREACH, "unreachable"), UNREACHABLE),
        (OSError(errno.ECONNRESET, "reset"), RESET),
        (OSError(errno.ETIMEDOUT, "timed out"), TIMEOUT),
        (OSError(errno.EPERM, "perm"), "other"),
    ],
)
def test_outcome_of(exc: BaseException | None, outcome: str) -> None:
    assert outcome_of(exc).outcome == outcome


@pytest.mark.parametrize(
    ("outcomes", "cause"),
    [
        ([REFUSED, REFUSED, TIMEOUT], "master-port-filtered"),
        ([TIMEOUT, TIMEOUT, REFUSED], "master-port-refused"),
        ([UNREACHABLE], "master-no-route"),
        (["other"], "master-no-route"),
        ([REFUSED, CONNECTED], None),
        ([REFUSED, RESET], None),
    ],
)
def test_classify_connect(outcomes: list[str], cause: str | None) -> None:
    attempts = [Attempt(o, o) for o in outcomes]
    err = classify_connect(attempts, "198.18.0.1", 29500, 5.0, master="node0", host="n2",
                           rank=2)
    if cause is None:
        assert err is None
        return
    assert err is not None and err.cause == cause and err.rank == 2 and err.host == "n2"
    assert "198.18.0.1" in err.message and "(on n2, rank 2)" in err.message
    assert err.hint and f"{len(outcomes)} attempt(s)" in err.detail
    if cause == "master-port-filtered":
        assert "29500" in err.message and "--dport 29500" in err.hint


@pytest.mark.parametrize(("neighbor", "cause"),
                         [("FAILED", "master-no-route"), ("INCOMPLETE", "master-no-route"),
                          ("REACHABLE", "master-port-filtered"), ("STALE", "master-port-filtered"),
                          (None, "master-port-filtered")])
def test_timeouts_with_a_dead_neighbour_mean_nobody_has_the_address(
        neighbor: str | None, cause: str) -> None:
    err = classify_connect([Attempt(TIMEOUT, "timed out")], "198.18.0.9", 29500, 3.0,
                           neighbor=neighbor)
    assert err is not None and err.cause == cause


def test_classify_bind() -> None:
    err = classify_bind(OSError(errno.EADDRINUSE, "in use"), 29500, host="n0", rank=0)
    assert err.cause == "port-in-use" and "ss -ltnp 'sport = :29500'" in err.hint
    assert classify_bind(OSError(errno.EACCES, "denied"), 80).cause == "port-in-use"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_loop_retries_refused_until_rank0_listens() -> None:
    clock = FakeClock()

    def connect(addr: str, port: int, timeout: float) -> None:
        if clock.now < 2.0:
            raise OSError(errno.ECONNREFUSED, "refused")

    attempts, elapsed = connect_loop("a", 1, 10, connect=connect, clock=clock,
                                     sleep=clock.sleep)
    assert attempts[-1].outcome == CONNECTED and attempts[0].outcome == REFUSED
    assert 2.0 <= elapsed <= 2.0 + 1.0 * 1.5  # at most one (capped, jittered) pause late


def test_retry_delay_backs_off_with_a_cap() -> None:
    assert retry_delay(0, 0.5) == pytest.approx(0.1)
    assert retry_delay(3, 0.5) == pytest.approx(0.8)
    assert retry_delay(50, 0.5) == pytest.approx(1.0)
    assert retry_delay(50, 0.999) < 1.5 and retry_delay(0, 0.0) == pytest.approx(0.05)


def test_loop_on_dropped_syns_stops_at_the_deadline() -> None:
    clock = FakeClock()

    def connect(addr: str, port: int, timeout: float) -> None:
        clock.now += timeout
        raise TimeoutError("timed out")

    attempts, elapsed = connect_loop("a", 1, 7, connect=connect, clock=clock,
                                     sleep=clock.sleep)
    assert elapsed == pytest.approx(7.0)
    assert [a.outcome for a in attempts] == [TIMEOUT, TIMEOUT, TIMEOUT]


def test_real_refused_within_connect_timeout() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(RendezvousError) as info:
        preflight(cfg("127.0.0.1", port=port, nodes=1, world=2), None, 1.5, host="h")
    assert info.value.cause == "master-port-refused"
    assert 1.4 < time.monotonic() - t0 < 1.5 + 5  # its timeout, not a wait past it


def test_real_connects_to_a_late_listener() -> None:
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(0.8)
        server.bind(("127.0.0.1", port))
        server.listen(4)

    thread = threading.Thread(target=listen_later)
    thread.start()
    try:
        preflight(cfg("127.0.0.1", port=port, nodes=1, world=2), None, 10)
    finally:
        thread.join()
        server.close()


def test_real_port_in_use_on_rank0() -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        with pytest.raises(RendezvousError) as info:
            preflight(cfg("127.0.0.1", rank=0, port=port, nodes=1, world=2), None, 5)
        assert info.value.cause == "port-in-use" and str(port) in info.value.message
    # free again (and a TIME_WAIT left behind must not count, as for TCPStore)
    preflight(cfg("127.0.0.1", rank=0, port=port, nodes=1, world=2), None, 5)


def test_real_unresolvable() -> None:
    with pytest.raises(RendezvousError) as info:
        preflight(cfg("no-such-host.invalid"), None, 5)
    assert info.value.cause == "master-unresolvable"
    assert "getent hosts no-such-host.invalid" in info.value.hint


def test_rank0_whose_master_addr_is_not_its_own() -> None:
    # a routing-table lookup only: rank 0 sends nothing
    with pytest.raises(RendezvousError) as info:
        preflight(cfg("198.18.250.250", rank=0), None, 5)
    assert info.value.cause == "master-no-route"
    assert "198.18.250.250" in info.value.message


def test_file_init_needs_no_port() -> None:
    preflight(cfg("no-such-host.invalid", init_method="file:///tmp/x"), None, 1)


def test_torchrun_agent_store_makes_rank0_connect_not_bind() -> None:
    port = free_port()
    with pytest.raises(RendezvousError) as info:
        preflight(cfg("127.0.0.1", rank=0, port=port, nodes=1, world=2), None, 0.5,
                  environ={"TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert info.value.cause == "master-port-refused"


# ---- what answers on MASTER_PORT ------------------------------------------------------------

def test_judge_store_reply() -> None:
    import struct

    from ddpnet.net import probe

    nonce = 4242
    assert probe.judge_store_reply(struct.pack("=I", nonce), False, nonce).kind == probe.TCPSTORE
    assert probe.judge_store_reply(b"HTTP/1.0 400", False, nonce).kind == probe.FOREIGN
    assert probe.judge_store_reply(b"", True, nonce).kind == probe.FOREIGN  # closed on hello
    assert probe.judge_store_reply(b"", False, nonce).kind == probe.SILENT  # undecided
    hello = probe.store_hello(7)
    assert len(hello) == 10 and hello[0] == 0 and hello[5] == 13


def test_classify_store_names_a_foreign_service_only() -> None:
    from ddpnet.net import probe

    err = probe.classify_store(probe.StoreProbe(probe.FOREIGN, b"SSH-2.0-OpenSSH\r\n"),
                               "10.0.0.1", 29500, master="n0", host="w1", rank=3)
    assert err is not None and err.cause == "master-port-foreign"
    assert "answered, but not a TCPStore" in err.message and "'SSH-2.0-OpenSSH..'" in \
        err.message and "(on w1, rank 3)" in err.message
    assert "ss -ltnp" in err.hint and "MASTER_PORT=" in err.hint
    for kind in (probe.TCPSTORE, probe.NO_ANSWER):
        assert probe.classify_store(probe.StoreProbe(kind), "10.0.0.1", 29500) is None
    # silent for all of the caller's patience: not a store either
    quiet = probe.classify_store(probe.StoreProbe(probe.SILENT), "10.0.0.1", 29500, waited=9.0)
    assert quiet is not None and "never answered the store's hello in 9.0 s" in quiet.message


def test_port_in_use_error_names_holder_and_kind() -> None:
    from ddpnet.net import probe
    from ddpnet.net.ports import Holder

    stale = probe.port_in_use_error(29500, (Holder(812, "python", "python train.py"),),
                                    probe.StoreProbe(probe.TCPSTORE), host="n0", rank=0)
    assert stale.cause == "port-in-use" and "a TCPStore" in stale.message
    assert "pid 812 (python train.py)" in stale.message and "kill 812" in stale.hint
    other = probe.port_in_use_error(29500, (), probe.StoreProbe(probe.FOREIGN, b"HTTP/1.0"))
    assert "another service" in other.message and "cannot see" in other.message
    assert "ss -ltnp 'sport = :29500'` (as root)" in other.hint


def test_probe_store_tells_a_tcpstore_from_other_services() -> None:
    import os
    import socket
    import threading

    from torch.distributed import TCPStore

    from ddpnet.net import probe
    from ddpnet.net.ports import port_holders

    store = TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    assert probe.probe_store("127.0.0.1", store.port, 2.0).kind == probe.TCPSTORE
    assert os.getpid() in [h.pid for h in port_holders(store.port)]
    del store

    def serve(sock: socket.socket, answer: bytes | None) -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(64)
            if answer:
                conn.sendall(answer)
            conn.recv(64)  # hold the connection until the prober closes it

    for answer, kind in ((b"HTTP/1.0 400 Bad Request\r\n", probe.FOREIGN),
                         (None, probe.SILENT)):
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            t = threading.Thread(target=serve, args=(srv, answer), daemon=True)
            t.start()
            got = probe.probe_store("127.0.0.1", srv.getsockname()[1], 0.5)
            assert got.kind == kind, got
            t.join(5)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert probe.probe_store("127.0.0.1", port, 0.5).kind == probe.NO_ANSWER
    # nothing but silence: re-probed until the patience is spent, then reported as silent
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)  # never accepted: the kernel completes the handshakes, no one answers
        got, waited = probe.probe_until_answer("127.0.0.1", srv.getsockname()[1], 1.0)
        assert got.kind == probe.SILENT and 1.0 <= waited < 3.0


def test_master_addr_on_a_bridge_is_named_when_local_world_size_places_the_rank(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # MASTER_ADDR is docker0's address (every node has it), NODE_RANK unset: RANK=1 with a
    # given LOCAL_WORLD_SIZE=1 puts this rank on another node than rank 0's
    import ddpnet.net.interfaces as interfaces
    from ddpnet.env.resolve import resolve
    from ddpnet.net.interfaces import Address, Interface
    from ddpnet.net.probe import refuse_master_on_bridge
    from ddpnet.net.select import Choice, Selection

    bridge = Interface("docker0", True, (Address("172.17.0.1", 16, 4),), 1500, None, "docker")
    monkeypatch.setattr(interfaces, "list_interfaces", lambda: (bridge,))
    auto = Choice("docker0", "auto", "MASTER_ADDR 172.17.0.1 is this host's address")
    sel = Selection("docker0", "172.17.0.1", auto, auto, auto)
    base = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "172.17.0.1",
            "MASTER_PORT": "29500"}
    with pytest.raises(RendezvousError) as info:
        refuse_master_on_bridge(resolve({**base, "LOCAL_WORLD_SIZE": "1"}), sel, "n1")
    assert info.value.cause == "master-address-local" and "docker0" in info.value.message
    # RANK alone guesses the node: it may share rank 0's host, so nothing is refused
    refuse_master_on_bridge(resolve(base), sel, "n1")


_HOSTS = """127.0.0.1 localhost
198.18.0.2 n0   # a stale line: n0 moved
198.18.0.1 n0.lab n0-old
198.18.0.2 n1
"""


def test_a_refusal_where_a_hosts_line_sends_the_master_name_to_another_node() -> None:
    # MASTER_ADDR n0 resolves on this worker, through its own /etc/hosts, to n1's address:
    # the fix is that line, not "start rank 0" on n1
    refused = classify_connect([Attempt(REFUSED, "Connection refused")] * 3, "198.18.0.2",
                               29500, 10.0, master="n0", host="n2", rank=2)
    assert refused is not None
    named = name_source(refused, "n0", "198.18.0.2", _HOSTS, "n2")
    assert named.cause == "master-port-refused" and named.rank == 2
    assert "resolves here through the /etc/hosts line '198.18.0.2 n0' to 198.18.0.2, which " \
        "that file also names n1: another node, so the line is likely stale" in named.message
    assert named.hint.startswith("on n2: fix or remove the line '198.18.0.2 n0' in /etc/hosts")
    assert "`getent hosts n0` here and on rank 0's host must agree" in named.hint
    assert named.hint.endswith(refused.hint)  # starting rank 0 stays the other possibility
    # an address given as such, or a name the file does not map, keeps the error as it was
    assert name_source(refused, "198.18.0.2", "198.18.0.2", _HOSTS) is refused
    assert name_source(refused, "n9", "198.18.0.2", _HOSTS) is refused


def test_timeouts_where_another_host_answers_for_this_nodes_address_are_a_duplicate() -> None:
    err = classify_connect([Attempt(TIMEOUT, "timed out")], "198.18.0.1", 29500, 3.0,
                           neighbor="REACHABLE",
                           duplicate=("198.18.0.2", "eth0", ("02:00:00:00:00:09",)))
    assert err is not None and err.cause == "duplicate-address"
    assert "another host (MAC 02:00:00:00:00:09) answers ARP for this node's own address " \
        "198.18.0.2 on eth0" in err.message and "no firewall needs opening" in err.hint
    none = classify_connect([Attempt(TIMEOUT, "timed out")], "198.18.0.1", 29500, 3.0,
                            duplicate=("198.18.0.2", "eth0", ()))
    assert none is not None and none.cause == "master-port-filtered"


def test_arp_probe_and_reply_round_trip() -> None:
    from ddpnet.net.routes import arp_probe, parse_arp_reply

    own, other = bytes.fromhex("020000000001"), bytes.fromhex("020000000009")
    probe = arp_probe(own, "198.18.0.2")
    assert len(probe) == 42 and probe[28:32] == b"\0" * 4  # sender 0.0.0.0: a probe
    reply = other + own + b"\x08\x06" + bytes.fromhex("0001080006040002") + other \
        + bytes([198, 18, 0, 2]) + own + b"\0" * 4
    assert parse_arp_reply(reply, "198.18.0.2", own) == "02:00:00:00:00:09"
    assert parse_arp_reply(reply, "198.18.0.3", own) is None
    assert parse_arp_reply(probe, "198.18.0.2", own) is None  # a request, not an answer


def test_timeouts_the_nodes_own_kernel_explains_are_named_by_it_not_a_firewall() -> None:
    path = ("asymmetric-route", "this node's packets from 198.18.0.2 to 198.18.0.1 leave by "
            "wan0 (routing table 100, chosen by a policy rule), not by eth0", "route it")
    err = classify_connect([Attempt(TIMEOUT, "timed out")], "198.18.0.1", 29500, 3.0,
                           path=path)
    assert err is not None and err.cause == "asymmetric-route"
    assert "leave by wan0" in err.message and err.hint.endswith("no firewall needs opening")
