"""Dump files (edge): each rank's last state and rank 0's report under ``$DDPNET_WATCH_DIR``, for
``ddpnet diagnose --dumps``. A dump that cannot be written is None: never what takes a rank down."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpnet.watch.state import Diagnosis, RankState, Snapshot

DIR_VARIABLE = "DDPNET_WATCH_DIR"
DEFAULT_DIR = "ddpnet-watch"


def watch_dir(environ: Mapping[str, str]) -> Path:
    """Where dumps and reports go (pure)."""
    return Path(environ.get(DIR_VARIABLE) or DEFAULT_DIR)


def _write(path: Path, text: str) -> Path | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)  # a reader never sees half a file
    except OSError:
        return None
    return path


def write_state(directory: Path, state: RankState, reason: str,
                verdict: Diagnosis | None = None,
                heard: Mapping[str, Any] | None = None) -> Path | None:
    """``rank-N.json``, with the rank's own verdict (cut off) or the hub's it obeyed (``heard``)."""
    data: dict[str, Any] = {"reason": reason, "state": state.to_dict()}
    if verdict is not None:
        data["verdict"] = verdict.to_dict()
    if heard is not None:
        data["heard"] = dict(heard)
    return _write(directory / f"rank-{state.rank}.json", json.dumps(data))


def write_report(directory: Path, report: Mapping[str, Any], html: str) -> Path | None:
    written = _write(directory / "report.json", json.dumps(report, indent=1))
    if written is None or _write(directory / "report.html", html) is None:
        return None
    return written


def write_warnings(directory: Path, warnings: Sequence[Mapping[str, Any]]) -> Path | None:
    """``warnings.json``: what the hub warned about while the job ran (stragglers)."""
    return _write(directory / "warnings.json", json.dumps(list(warnings), indent=1))


def read_dumps(directory: Path) -> Snapshot:
    """Every ``rank-N.json`` under ``directory`` as one snapshot; OSError/ValueError when none or
    one is unreadable."""
    states: dict[int, RankState | None] = {}
    for path in sorted(directory.glob("rank-*.json")):
        data = json.loads(path.read_text())
        state = RankState.from_dict(data["state"])
        states[state.rank] = state
    if not states:
        raise FileNotFoundError(f"no rank-N.json dump in {directory}")
    world = max(s.world_size for s in states.values() if s is not None)
    for rank in range(world):
        states.setdefault(rank, None)
    taken = max(s.published for s in states.values() if s is not None)
    return Snapshot(world_size=world, taken=taken, states=states)


def read_verdicts(directory: Path) -> tuple[Diagnosis | None, tuple[Diagnosis, ...]]:
    """The hub's verdict (``report.json``) and each rank's own there; unreadable files are
    absent."""
    hub = None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        hub = Diagnosis.from_dict(json.loads((directory / "report.json").read_text())
                                  ["diagnosis"])
    own = []
    for path in sorted(directory.glob("rank-*.json")):
        try:
            data = json.loads(path.read_text())
            if isinstance(data.get("verdict"), dict):
                own.append(Diagnosis.from_dict(data["verdict"]))
        except (OSError, ValueError, TypeError):
            continue
    return hub, tuple(own)


def verdict_of(dump: Mapping[str, Any]) -> dict[str, Any] | None:
    """The verdict a rank's dump holds, shaped as the hub's report (``launch.blame``), or None
    (pure)."""
    heard = dump.get("heard")
    if isinstance(heard, Mapping) and isinstance(heard.get("diagnosis"), Mapping):
        return dict(heard)
    own, state = dump.get("verdict"), dump.get("state")
    if isinstance(own, Mapping) and isinstance(state, Mapping) and "rank" in state:
        world = int(state.get("world_size", 0) or 0)
        return {"diagnosis": dict(own), "snapshot": {
            "world_size": world, "states": {str(state["rank"]): dict(state)}}}
    return None


def heard_verdicts(directory: Path, ranks: Sequence[int], since: float
                   ) -> list[dict[str, Any]]:
    """The verdicts in ``ranks``' dumps written since ``since``, the hub's first: what a node's
    launcher learns once its ranks exited; older or unreadable dumps are absent."""
    hub: list[dict[str, Any]] = []
    own: list[dict[str, Any]] = []
    for rank in ranks:
        path = directory / f"rank-{rank}.json"
        try:
            if path.stat().st_mtime < since:
                continue
            dump = json.loads(path.read_text())
            report = verdict_of(dump)
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        if report is not None:
            (hub if isinstance(dump.get("heard"), Mapping) else own).append(report)
    return hub + own
