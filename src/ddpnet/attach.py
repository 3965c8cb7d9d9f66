"""``python -m ddpnet.attach SCRIPT ARGS`` / ``python -m ddpnet.attach -m MODULE ARGS``: run an
unchanged training script with the watch attached to its own ``init_process_group``
(``ddpnet.watch.attach``), as ``python SCRIPT ARGS`` would run it (``sys.argv``,
``sys.path[0]``, ``__main__``). The one line for a plain torchrun or srun user::

    torchrun --nproc-per-node 2 -m ddpnet.attach train.py --lr 0.1
    srun python -m ddpnet.attach train.py --lr 0.1
    python -m ddpnet.attach train.py      # a script that starts its ranks by mp.spawn

The Pythons the script starts (``mp.spawn``'s ranks, subprocesses) inherit the hook through
the environment (``--env``'s variables).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence

USAGE = ("usage: python -m ddpnet.attach SCRIPT [ARGS...] | -m MODULE [ARGS...] | --env\n"
         "Run SCRIPT (or MODULE) with ddpnet's watch attached to its init_process_group;\n"
         "--env prints the variables that attach it to every Python started under them:\n"
         "  eval \"$(python -m ddpnet.attach --env)\"\n")


def main(argv: Sequence[str] | None = None) -> int:
    from ddpnet.errors import ConfigError
    from ddpnet.launch.command import Target
    from ddpnet.watch.attach import install, ranks_env

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if args == ["--env"]:
        sys.stdout.write(exports(os.environ))
        return 0
    try:
        target = Target.parse(args)
    except ConfigError as exc:
        sys.stderr.write(f"ddpnet: error: {exc.message}\nhint: e.g. python -m ddpnet.attach "
                         "train.py --lr 0.1, or python -m ddpnet.attach -m mypkg.train\n")
        return 2
    install()
    # the Pythons it starts attach too: mp.spawn's ranks (the guides' launcher), a
    # subprocess that trains; the hook does nothing in a process that makes no group
    os.environ.update(ranks_env(os.environ, True))
    run(target.program, target.args, target.module)
    return 0


def exports(environ: Mapping[str, str]) -> str:
    """``export ...`` lines for a shell: the hook's variable and PYTHONPATH (pure)."""
    import shlex

    from ddpnet.watch.attach import ranks_env

    return "".join(f"export {k}={shlex.quote(v)}\n"
                   for k, v in sorted(ranks_env(environ, True).items()))


def run(program: str, args: Sequence[str], module: bool) -> None:
    """Run it as ``python [-m] PROGRAM ARGS`` would (edge)."""
    if module:
        sys.argv = [program, *args]  # runpy puts the module's path in argv[0]
        runpy.run_module(program, run_name="__main__", alter_sys=True)
        return
    if not os.path.exists(program):
        sys.stderr.write(f"ddpnet: error: script {program} not found (in {os.getcwd()})\n"
                         "hint: check the path, or give -m MODULE\n")
        raise SystemExit(2)
    sys.argv = [program, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(program))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    raise SystemExit(main())
