"""Worker entry for ``ddpnet train --local N``: ``python -m ddpnet.train CONFIG_JSON [--json]``."""

from __future__ import annotations

import json
import sys

from ddpnet.errors import DdpnetError


def main(argv: list[str]) -> int:
    from ddpnet.output import print_error
    from ddpnet.train.config import TrainConfig
    from ddpnet.train.report import report
    from ddpnet.train.run import run_rank

    cfg = TrainConfig(**json.loads(argv[0]))
    as_json = "--json" in argv[1:]
    try:
        return report(run_rank(cfg, as_json=as_json), as_json)
    except DdpnetError as exc:
        print_error(exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:  # the parent forwarded Ctrl-C: stop quietly, as a shell would
        return 130


if __name__ == "__main__":
    from ddpnet.train.run import leave

    leave(main(sys.argv[1:]))
