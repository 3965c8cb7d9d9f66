"""Who holds a port: /proc/net/tcp{,6} parsed, each socket on the port with its state,
process and user; a listener or a connection (an outgoing one's source port, TIME_WAIT)."""

from __future__ import annotations

import os
import socket

from ddpnet.net.ports import Holder, parse_proc_tcp, port_holders, socket_holders

# 29500 = 0x733C; 5201 = 0x1451; 22 = 0x0016
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11
   1: 010012C6:733C 020012C6:1451 01 00000000:00000000 00:00000000 00000000  1000        0 12
   2: 010012C6:733C 030012C6:1451 06 00000000:00000000 03:00001770 00000000     0        0 0
   3: garbage
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:733C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 13
"""


def test_parse_proc_tcp_both_families() -> None:
    v4 = parse_proc_tcp(TCP)
    assert [(s.local, s.local_port, s.remote, s.remote_port, s.state, s.uid, s.inode)
            for s in v4] == [
        ("0.0.0.0", 22, "0.0.0.0", 0, "LISTEN", 0, 11),
        ("198.18.0.1", 29500, "198.18.0.2", 5201, "ESTABLISHED", 1000, 12),
        ("198.18.0.1", 29500, "198.18.0.3", 5201, "TIME_WAIT", 0, 0)]
    (v6,) = parse_proc_tcp(TCP6)
    assert (v6.local, v6.local_port, v6.state) == ("::1", 29500, "LISTEN")


def test_holders_of_a_port_name_connections_with_process_and_user() -> None:
    held = socket_holders(parse_proc_tcp(TCP), 29500, {12: 4242},
                          {4242: ("curl", "curl http://198.18.0.2:5201/")}, {1000: "alice"})
    assert [h.state for h in held] == ["ESTABLISHED", "TIME_WAIT"]
    assert not any(h.listener for h in held)
    assert held[0].describe() == ("ESTABLISHED 198.18.0.1:29500 -> 198.18.0.2:5201, pid 4242 "
                                  "(curl http://198.18.0.2:5201/), user alice")
    assert "no process (the kernel keeps it after the close)" in held[1].describe()
    multi = Holder(7, "python", "python -c \nimport x\n", "ESTABLISHED", "a:1", "b:2")
    assert multi.describe() == "ESTABLISHED a:1 -> b:2, pid 7 (python -c \\nimport x\\n)"
    (lst,) = socket_holders(parse_proc_tcp(TCP6), 29500, {}, {}, {0: "root"})
    assert lst.listener and lst.describe() == "a process this user cannot see, user root"


def test_port_holders_sees_an_outgoing_connections_source_port() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with socket.socket() as out:
            out.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
            out.bind(("127.0.0.1", 0))
            port = out.getsockname()[1]
            out.connect(srv.getsockname())
            conn, _ = srv.accept()
            with conn:
                held = port_holders(port)
                mine = [h for h in held if h.state == "ESTABLISHED"]
                assert mine and mine[0].pid == os.getpid(), held
                assert mine[0].local == f"127.0.0.1:{port}"
                assert mine[0].remote == f"127.0.0.1:{srv.getsockname()[1]}"
                assert mine[0].user  # a name (or the uid where none maps)
                assert not any(h.listener for h in held)


def test_port_in_use_error_for_a_connection_fits_the_fix() -> None:
    from ddpnet.net import probe

    conn = Holder(4242, "curl", "curl x", "ESTABLISHED", "198.18.0.1:40000",
                  "198.18.0.2:5201", "root")
    err = probe.port_in_use_error(40000, (conn,), probe.StoreProbe(probe.NO_ANSWER),
                                  host="n0", rank=0, ephemeral=(32768, 60999))
    assert err.cause == "port-in-use"
    assert "not by a listener but as the local port of 1 connection(s)" in err.message
    assert "ESTABLISHED 198.18.0.1:40000 -> 198.18.0.2:5201, pid 4242 (curl x), user root" \
        in err.message
    assert "ip_local_port_range" in err.message and "32768-60999" in err.message
    assert err.hint.startswith("export MASTER_PORT=29500 (outside 32768-60999)")
    assert "ddpnet tune --master-port 40000" in err.hint and "ss -ltnp" not in err.hint
    assert "ss -tanp 'sport = :40000'" in err.hint
    # a port outside the range, bound by the process itself: no range change proposed
    own = probe.port_in_use_error(29500, (conn,), probe.StoreProbe(probe.NO_ANSWER),
                                  ephemeral=(32768, 60999))
    assert "bound it itself" in own.message and "ddpnet tune" not in own.hint
    assert own.hint.startswith("export MASTER_PORT=32767")


def test_a_port_held_by_this_process_is_found_while_it_listens() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        held = port_holders(srv.getsockname()[1])
        assert [h.pid for h in held if h.listener] == [os.getpid()]
