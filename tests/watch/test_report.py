"""watch.report's text: the rank table names every host whole."""

from __future__ import annotations

from ddpnet.watch.report import render_text
from ddpnet.watch.state import Diagnosis, RankState, Snapshot


def test_a_long_host_name_is_shown_whole_and_the_columns_stay_aligned() -> None:
    # a lab node of a run whose pid has 7 digits: 15 characters; the table once cut it to
    # 14 ("wd1148217x49-n"), which names no node (or another one)
    hosts = ("wd1148217x49-n0", "wd1148217x49-n1", "a-much-longer-node-name.cluster.example")
    states = {r: RankState(rank=r, world_size=3, host=h, step=10, phase="backward")
              for r, h in enumerate(hosts)}
    text = render_text(Diagnosis("rank-gone", "rank 2 exited", (2,), (hosts[2],)),
                       Snapshot(3, 0.0, states, {}))
    table = text.splitlines()[text.splitlines().index(next(
        line for line in text.splitlines() if line.lstrip().startswith("rank  host")))]
    rows = [line for line in text.splitlines() if line.startswith("     ")]
    assert len(rows) == 3
    for host, row in zip(hosts, rows, strict=True):
        assert f" {host} " in row
    # the step column starts at the same place in the header and every row
    step_at = table.index("step") + len("step")
    assert all(row[step_at - 2:step_at] == "10" for row in rows), [table, *rows]
