"""``python -m ddpnet.bench OPTIONS_JSON``: one rank of ``ddpnet bench --local N``.

The parent validated the flags and serialised :class:`BenchOptions`; a rank runs them
without parsing a command line again. Errors end as the CLI's do: one line, a hint, the
exit code (a traceback only with ``DDPNET_DEBUG=1``).
"""

from __future__ import annotations

import os
import sys
import traceback

from ddpnet.errors import DdpnetError


def main(argv: list[str]) -> int:
    from ddpnet.bench.command import run
    from ddpnet.bench.options import BenchOptions
    from ddpnet.bench.render import report
    from ddpnet.output import print_error

    try:
        options = BenchOptions.from_json(argv[0])
        return report(run(options), options.as_json)
    except DdpnetError as exc:
        if os.environ.get("DDPNET_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        print_error(exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("ddpnet: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
