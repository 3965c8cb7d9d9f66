"""What ``ddpnet bench`` was asked: the measurement (:class:`BenchConfig`) plus how this run
is carried out (backend, timeout, outputs, ``--local N``). Pure; frozen; one JSON string
carries it to the ranks ``--local`` starts (``python -m ddpnet.bench OPTIONS``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from ddpnet.bench.config import BenchConfig, parse_collectives, parse_size
from ddpnet.errors import ConfigError
from ddpnet.local import check_world


@dataclass(frozen=True)
class BenchOptions:
    """``backend`` as ``ddpnet.init()`` takes it; ``timeout`` bounds the process group and a
    ``--local`` run; ``local``: start that many ranks here (None: this process is one rank)."""

    config: BenchConfig
    backend: str = "auto"
    timeout: float = 900.0
    as_json: bool = False
    csv_path: str | None = None
    plot_path: str | None = None
    local: int | None = None
    #: a ``--local`` rank: rank 0 ends the run itself at ``timeout``, naming what it was
    #: measuring (the parent's own limit is later, its backstop)
    deadline: bool = False

    def for_rank(self) -> BenchOptions:
        """What each rank of ``--local N`` runs: the same, without ``--local``."""
        return replace(self, local=None, deadline=True)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> BenchOptions:
        data: dict[str, Any] = json.loads(text)
        cfg = dict(data.pop("config"))
        cfg["collectives"] = tuple(cfg["collectives"])
        return BenchOptions(config=BenchConfig(**cfg), **data)


#: the longest ``--timeout`` (seconds) a bench run takes
MAX_TIMEOUT = 86400.0


def check_timeout(seconds: float) -> float:
    """``--timeout`` must be a positive, finite number of seconds."""
    if not 0 < seconds <= MAX_TIMEOUT:  # nan and inf fail too
        raise ConfigError(f"--timeout {seconds:g}: must be a positive number of seconds, "
                          f"at most {MAX_TIMEOUT:g} (a day)", "e.g. --timeout 900 (the default)")
    return seconds


def build_options(*, collectives: str, min_bytes: str, max_bytes: str | None, factor: int,
                  iters: int, warmup: int, dtype: str, op: str, mode: str, check: bool,
                  baseline: str, baseline_time: float, min_busbw: float | None,
                  backend: str, timeout: float, as_json: bool, csv_path: str | None,
                  plot_path: str | None, local: int | None) -> BenchOptions:
    """Flags -> BenchOptions (ConfigError on bad values, ``--local`` bounded before any
    rank starts)."""
    config = BenchConfig(
        collectives=parse_collectives(collectives), min_bytes=parse_size(min_bytes),
        max_bytes=None if max_bytes is None else parse_size(max_bytes), factor=factor,
        iters=iters, warmup=warmup,
        dtype=dtype, op=op, mode=mode, check=check, baseline=baseline,
        baseline_seconds=baseline_time, min_busbw_gbps=min_busbw, progress=not as_json,
    )
    if local is not None:
        check_world(local)
    return BenchOptions(config, backend, check_timeout(timeout), as_json, csv_path,
                        plot_path, local)
