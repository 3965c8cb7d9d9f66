"""``python -m ddpnet.bench OPTIONS_JSON``: one rank of ``ddpnet bench --local N``.

The parent validated the flags and serialised :class:`BenchOptions`; a rank runs them
without parsing a command line again, with the CLI's error conventions.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from ddpnet.local import die_with_parent

    die_with_parent()
    from ddpnet.bench.command import run
    from ddpnet.bench.options import BenchOptions
    from ddpnet.bench.render import report
    from ddpnet.output import guarded, json_mode, speak_flags

    def body() -> int:
        options = BenchOptions.from_json(argv[0])
        json_mode(options.as_json)
        speak_flags()  # started by the CLI: its user typed flags
        return report(run(options), options.as_json)

    return guarded(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
