"""Helpers for tests that need a real lab (network namespaces).

    # conftest.py of your test directory (a fixture imported into a test module trips ruff F811):
    from tests.lab_util import make_lab
    __all__ = ["make_lab"]

    # test module:
    from tests.lab_util import fresh_lab, requires_netns
    pytestmark = requires_netns                     # skip with a reason without root/netns

    def test_x(make_lab):
        lab = make_lab("nt", nodes=3, rate="1gbit")  # up; always down after the test
        lab.run([...])

    @pytest.fixture(scope="module")
    def lab():                                      # one lab shared by a module's tests
        with fresh_lab("nt", nodes=2) as lab:
            yield lab

Names are ``<prefix><pid>x<counter>`` so concurrent test runs never collide; use your own
prefix (the shared-machine rule).
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from ddpnet.lab import Lab
from ddpnet.lab.topology import LabNode
from tests import zygote


@functools.lru_cache(maxsize=1)
def netns_unavailable_reason() -> str | None:
    """Why a lab cannot be built here, or None when it can (root, tools, a real netns)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); run the tests as root"
    for tool in ("ip", "tc", "unshare", "nft"):
        if shutil.which(tool) is None:
            return f"needs '{tool}' (apt-get install iproute2 nftables util-linux)"
    try:
        probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace: {exc}"
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    return None


#: mark a test (or ``pytestmark =`` a module) that builds a lab
requires_netns = pytest.mark.skipif(
    netns_unavailable_reason() is not None,
    reason=netns_unavailable_reason() or "network namespaces available",
)

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """A lab name no other test (process) uses at the same time: ``<prefix><pid>x<n>``."""
    return f"{prefix}{os.getpid()}x{next(_counter)}"


#: what starts a user's interpreter or launcher: always a real exec (tests/zygote.py)
_EXEC_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
_EXEC_COMMANDS = frozenset({"launch", "exec", "attach", "sbatch", "k8s"})


def forks_in_zygote(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is one of our Pythons a forking lab takes from the zygote: ``python
    SCRIPT.py ...`` or ``python -m MODULE ...``, not a launcher (torchrun, ``ddpnet launch``,
    ``exec``, ``attach``: their interpreter start-up is what the test runs) and not ``-c``
    (a port holder or listener found by its command line)."""
    if len(argv) < 2 or argv[0] != sys.executable:
        return False
    if argv[1] == "-m":
        module = argv[2] if len(argv) > 2 else ""
        if module in _EXEC_MODULES:
            return False
        return not (module == "ddpnet" and len(argv) > 3 and argv[3] in _EXEC_COMMANDS)
    return argv[1].endswith(".py") and os.path.isfile(argv[1])


class ForkingLab(Lab):
    """A lab whose nodes' own Pythons (``forks_in_zygote``) are forked from the test zygote
    inside the node, torch already imported (issue #39): ``run``, ``popen`` and ``exec`` as
    :class:`Lab` has them, every other command as it runs there."""

    def _spawn(self, node: LabNode, argv: Sequence[str], env: Mapping[str, str] | None,
               keep_cgroup: bool = False, **kwargs: Any) -> Any:
        full = {**os.environ, **(env or {})}
        if keep_cgroup or not forks_in_zygote(argv) or not zygote.forkable(full):
            return super()._spawn(node, argv, env, keep_cgroup, **kwargs)
        return zygote.in_node(node, argv[1:], full, **kwargs)


@contextmanager
def fresh_lab(prefix: str, *, fork: bool = False, **kwargs: Any) -> Iterator[Lab]:
    """A uniquely named lab, up for the ``with`` body and always removed after it;
    ``fork=True``: a :class:`ForkingLab`."""
    with (ForkingLab if fork else Lab)(name=unique_name(prefix), **kwargs) as lab:
        yield lab


@pytest.fixture
def make_lab() -> Iterator[Callable[..., Lab]]:
    """``make_lab(prefix, fork=False, **Lab kwargs)`` builds a uniquely named lab (a
    :class:`ForkingLab` with ``fork=True``); every lab it built is
    removed when the test ends, pass or fail."""
    labs: list[Lab] = []

    def _make(prefix: str, *, fork: bool = False, **kwargs: Any) -> Lab:
        lab = (ForkingLab if fork else Lab)(name=unique_name(prefix), **kwargs)
        lab.up()  # removes what it half-built if it fails
        labs.append(lab)
        return lab

    yield _make
    errors = []
    for lab in reversed(labs):
        try:
            lab.down()
        except Exception as exc:  # tear every lab down, then report the first error
            errors.append(exc)
    if errors:
        raise errors[0]
