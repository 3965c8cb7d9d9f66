"""``ddpnet k8s``: render (pure, :mod:`ddpnet.k8s.render`), then the edge: write ``-o FILE``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpnet.k8s.options import K8sOptions
from ddpnet.k8s.render import header, render, to_yaml

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class K8sRun:
    """The job to render and where to write it (None: stdout)."""

    options: K8sOptions
    path: str | None = None
    #: load every object into the official models (the ``k8s`` extra) before writing
    validate: bool = False


@dataclass(frozen=True)
class K8sResult:
    """The objects, their YAML, and where it was written."""

    kind: str
    objects: tuple[dict[str, Any], ...]
    yaml: str
    path: str | None = None
    #: None: not validated; else what the official models refused (empty: valid)
    problems: tuple[str, ...] | None = None

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "objects": list(self.objects), "yaml": self.yaml,
                "path": self.path, "validated": self.problems is not None,
                "problems": list(self.problems or ())}

    def summary(self) -> str:
        """``wrote job.yaml: Service x-rdzv, PyTorchJob x`` (after ``-o``)."""
        objs = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in self.objects)
        return f"wrote {self.path}: {objs}"


def run(request: K8sRun) -> K8sResult:
    """Render; with ``validate``, check against the models and write nothing invalid."""
    objects = render(request.options)
    text = to_yaml(objects, header(request.options))
    found = None
    if request.validate:
        from ddpnet.k8s.models import problems

        found = tuple(problems(objects))
    if request.path and not found:
        Path(request.path).write_text(text)
    return K8sResult(request.options.kind, objects, text,
                     request.path if not found else None, found)


def show(result: Any, out: Console) -> None:
    """The YAML on stdout; after ``-o FILE`` one line naming what was written; what the
    models refused on stderr (and no YAML: it would not apply as rendered)."""
    if result.problems:
        for problem in result.problems:
            sys.stderr.write(f"ddpnet: invalid: {problem}\n")
        return
    text = result.summary() + "\n" if result.path else result.yaml
    out.print(text, markup=False, emoji=False, highlight=False, end="")
