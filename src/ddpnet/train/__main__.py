"""Worker entry for ``ddpnet train --local N``: ``python -m ddpnet.train CONFIG_JSON [--json]``."""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    from ddpnet.local import die_with_parent

    die_with_parent()
    from ddpnet.output import guarded, json_mode, speak_flags
    from ddpnet.train.config import TrainConfig
    from ddpnet.train.report import report
    from ddpnet.train.run import run_rank

    cfg = TrainConfig(**json.loads(argv[0]))
    as_json = "--json" in argv[1:]
    json_mode(as_json)
    speak_flags()  # started by the CLI: its user typed flags
    return guarded(lambda: report(run_rank(cfg, as_json=as_json), as_json), as_json=as_json)


if __name__ == "__main__":
    from ddpnet.train.run import leave

    leave(main(sys.argv[1:]))
