"""Worker entry for ``ddpnet check --local N``: ``python -m ddpnet.check OPTIONS_JSON``.
Runs one rank (from the variables ``ddpnet.local`` exported) and prints its JSON."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from ddpnet.local import die_with_parent

    die_with_parent()
    from ddpnet.check.options import CheckOptions
    from ddpnet.check.run import exit_fast, run
    from ddpnet.output import finish, guarded, json_mode

    json_mode(True)  # this rank's stdout is its JSON line for the parent
    return guarded(lambda: exit_fast(finish(run(CheckOptions.from_json(argv[0])),
                                            as_json=True)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
