"""Under --json, what C libraries write to fd 1 while a process group lives (NCCL with
NCCL_DEBUG=INFO) goes to stderr; the one JSON object stays alone on stdout (issue 19)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest

from ddpnet.net.ports import free_port
from tests.conftest import clean_environ

#: a rank's life: json mode, ddpnet.init() (gloo, one rank), then "the library" writes to
#: fd 1 from C (libc's puts, buffered by C's stdio) and through the fd, then the JSON
RANK = textwrap.dedent("""
    import ctypes, os, sys
    import ddpnet
    from ddpnet.output import emit_json, json_mode
    json_mode({json})
    handle = ddpnet.init(backend="gloo", rank=0, world_size=1, master_addr="127.0.0.1",
                         master_port={port})
    libc = ctypes.CDLL(None)
    libc.puts(b"host:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1")
    libc.fflush(None)
    os.write(1, b"host:1:1 [0] NCCL INFO comm 0x55 rank 0 nranks 1 - Init COMPLETE\\n")
    print("a stray print")
    emit_json({{"ok": True}})
    ddpnet.shutdown()
    os.write(1, b"NCCL INFO comm 0x55 rank 0 nranks 1 - Destroy COMPLETE\\n")
""")


def _rank(as_json: bool) -> subprocess.CompletedProcess[str]:
    code = RANK.format(json=as_json, port=free_port())
    return subprocess.run([sys.executable, "-c", code], env=clean_environ(),
                          capture_output=True, text=True, timeout=120)


def test_under_json_library_lines_on_fd_1_go_to_stderr() -> None:
    proc = _rank(as_json=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True}  # the whole of stdout
    assert proc.stdout.count("\n") == 1
    for line in ("Bootstrap : Using lo", "Init COMPLETE", "a stray print",
                 "Destroy COMPLETE"):
        assert line in proc.stderr


def test_without_json_stdout_is_left_alone() -> None:
    proc = _rank(as_json=False)
    assert proc.returncode == 0, proc.stderr
    assert "Init COMPLETE" in proc.stdout and "Bootstrap : Using lo" in proc.stdout
    assert '{"ok": true}' in proc.stdout and "NCCL" not in proc.stderr


def test_lend_and_restore_are_idempotent_and_off_without_json() -> None:
    code = textwrap.dedent("""
        import os
        from ddpnet import output
        output.lend_stdout()  # json mode off: nothing lent
        os.write(1, b"plain\\n")
        output.json_mode(True)
        output.lend_stdout(); output.lend_stdout()
        os.write(1, b"lent\\n")
        output.emit_json([1])
        output.restore_stdout(); output.restore_stdout()
        os.write(1, b"back\\n")
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=clean_environ(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "plain\n[1]\nback\n" and proc.stderr == "lent\n"


def test_relay_line_prefixes_and_keeps_lines_whole() -> None:
    """Lines of remote hosts, relayed from many threads: each whole, prefixed by its host."""
    code = textwrap.dedent("""
        import threading
        from ddpnet.output import relay_line
        def host(name):
            for i in range(200):
                relay_line(f"line {i} " + "x" * 200, prefix=name, stderr=i % 2 == 1)
        threads = [threading.Thread(target=host, args=(f"h{k}",)) for k in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        relay_line("verdict")
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=clean_environ(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out, err = proc.stdout.splitlines(), proc.stderr.splitlines()
    assert out[-1] == "verdict" and len(out) == 401 and len(err) == 400
    for line in out[:-1] + err:
        prefix, _, rest = line.partition("] ")
        assert prefix in ("[h0", "[h1", "[h2", "[h3") and rest.endswith("x" * 200), line


def _rendered(renderable: object, width: int) -> str:
    from ddpnet.output import console

    buf = io.StringIO()
    console(buf, width=width).print(renderable)
    return buf.getvalue()


def test_fit_widths_shrinks_the_widest_never_below_a_minimum() -> None:
    from ddpnet.output import fit_widths

    assert fit_widths([(5, 10), (3, 40)], 100) == [10, 40]  # fits: natural widths
    assert fit_widths([(5, 10), (3, 40)], 30) == [10, 20]   # the widest gives way
    assert fit_widths([(5, 10), (3, 40)], 12) == [6, 6]     # then both, evenly
    assert fit_widths([(5, 10), (30, 40)], 12) == [5, 30]   # minimums hold: overflow


def test_a_table_at_80_columns_cuts_no_value() -> None:
    """Rich alone renders this table as ``127.0.…`` and ``2.13.…`` at 80 columns."""
    from ddpnet.output import Whole, table

    t = table("nodes", ("rank", "host", "address", "interface", "mtu", "torch", "python",
                        "clock", "doctor", "command"))
    t.add_row("0", "node-0.cluster.example.org", "198.18.0.1", "eth0 (GLOO_SOCKET_IFNAME)",
              "9000", "2.13.0+cu128", "3.11.7", "+0.000 s", "pass",
              Whole("sysctl -w net.core.rmem_max=16777216"))
    for width in (80, 200):
        text = _rendered(t, width)
        assert "…" not in text
        for value in ("node-0.cluster.example.org", "198.18.0.1", "(GLOO_SOCKET_IFNAME)",
                      "2.13.0+cu128", "sysctl -w net.core.rmem_max=16777216",
                      "+0.000 s"):  # a short cell is one value: never split
            assert value in text, (width, value)
    assert len(_rendered(t, 200).splitlines()[1]) < 200  # no wider than it needs


def test_table_cells_wrap_between_words() -> None:
    from ddpnet.output import table

    prose = "hostname vm resolves only to loopback (127.0.0.1): a multi-node job would hang"
    t = table(None, ("check", "summary"))
    t.add_row("hostname", prose)
    text = _rendered(t, 40)
    assert max(len(line) for line in text.splitlines()) <= 40
    words = " ".join(line.split("│")[2].strip() for line in text.splitlines()
                     if line.count("│") == 3)
    assert words.endswith(prose)


def test_rank_ranges_fold_runs_and_keep_every_rank() -> None:
    from ddpnet.output import rank_ranges

    assert rank_ranges([9, 0, 1, 2, 3, 5, 7, 8]) == "0-3, 5, 7-9"
    assert rank_ranges([4]) == "4" and rank_ranges([]) == ""
    many = [r for r in range(4096) if r not in (1722, 3000)]
    assert rank_ranges(many) == "0-1721, 1723-2999, 3001-4095"


@pytest.mark.parametrize("cell", ["tcp://[fd00::2]:23456", "[fe80::1%eth0]:29500",
                                  "master [fd00::2] via eth0"])
def test_a_bracketed_ipv6_address_stays_in_a_table(cell: str) -> None:
    """rich read ``[fd00::2]`` as a markup tag and dropped it; a style still applies."""
    from ddpnet.output import console, table

    out = table(columns=("value", "status"))
    out.add_row(cell, "[green]pass[/]")
    buf = io.StringIO()
    console(buf, width=120).print(out)
    assert cell in buf.getvalue() and "[green]" not in buf.getvalue()
