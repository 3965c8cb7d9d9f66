"""Rank entry of ``ddpnet check``: ``python -m ddpnet.check OPTIONS_JSON [--human]``.

Runs one rank (from the variables ``ddpnet.local`` or an SSH launch exported) and prints its
JSON; with ``--human`` (rank 0 of ``check --hostfile`` without ``--json``) the verdict as
``ddpnet check`` prints it, and rank 0's progress lines on stderr."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from ddpnet.local import die_with_parent

    die_with_parent()
    from ddpnet.check.options import CheckOptions
    from ddpnet.check.render_text import render_result
    from ddpnet.check.run import exit_fast, run
    from ddpnet.check.torchimport import own_process
    from ddpnet.output import finish, guarded, json_mode, speak_flags

    own_process()

    human = argv[1:] == ["--human"]
    json_mode(not human)  # a worker's stdout is its JSON line for the parent
    speak_flags()  # started by the CLI: its user typed flags
    return guarded(lambda: exit_fast(finish(run(CheckOptions.from_json(argv[0])),
                                            as_json=not human, human=render_result)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
