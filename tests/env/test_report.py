"""``ddpnet env``'s configuration half: flags as overrides, exports, torchrun line, table."""

from __future__ import annotations

import io
from types import MappingProxyType

from rich.console import Console

from ddpnet.config import DistConfig
from ddpnet.env.report import EnvOptions, export_lines, render_config, torchrun_line

CFG = DistConfig(launcher="slurm", rank=5, world_size=8, local_rank=1, local_world_size=4,
                 node_rank=1, num_nodes=2, master_addr="node 0", master_port=29511,
                 init_method="env://", hosts=("n1", "n2"),
                 sources=MappingProxyType({"rank": "SLURM_PROCID"}),
                 notes=("slurm wins over manual",))


def test_only_given_flags_override_with_the_flag_as_source() -> None:
    opts = EnvOptions(rank="3", world_size="4")
    assert opts.overrides() == {"rank": ("3", "--rank"), "world_size": ("4", "--world-size")}
    assert EnvOptions().overrides() == {}


def test_exports_and_torchrun_quote_the_master() -> None:
    assert export_lines(CFG) == ("export MASTER_ADDR='node 0' MASTER_PORT=29511 WORLD_SIZE=8 "
                                 "RANK=5 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4")
    assert torchrun_line(CFG) == ("torchrun --nnodes 2 --nproc-per-node 4 --node-rank 1 "
                                  "--master-addr 'node 0' --master-port 29511 YOUR_SCRIPT.py")


def test_table_shows_sources_hosts_and_notes() -> None:
    buf = io.StringIO()
    render_config(CFG, Console(file=buf, width=200, color_system=None))
    text = buf.getvalue()
    assert "SLURM_PROCID" in text and "n[1-2] (2)" in text
    assert "note: slurm wins over manual" in text
    assert export_lines(CFG) in text and torchrun_line(CFG) in text
