"""``ddpnet k8s``: render (pure, :mod:`ddpnet.k8s.render`), then the edge: write ``-o FILE``."""

from __future__ import annotations

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


@dataclass(frozen=True)
class K8sResult:
    """The objects, their YAML, and where it was written."""

    kind: str
    objects: tuple[dict[str, Any], ...]
    yaml: str
    path: str | None = None
    exit_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "objects": list(self.objects), "yaml": self.yaml,
                "path": self.path}

    def summary(self) -> str:
        """``wrote job.yaml: Service x-rdzv, PyTorchJob x`` (after ``-o``)."""
        objs = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in self.objects)
        return f"wrote {self.path}: {objs}"


def run(request: K8sRun) -> K8sResult:
    objects = render(request.options)
    text = to_yaml(objects, header(request.options))
    if request.path:
        Path(request.path).write_text(text)
    return K8sResult(request.options.kind, objects, text, request.path)


def show(result: Any, out: Console) -> None:
    """The YAML on stdout; after ``-o FILE`` one line naming what was written."""
    text = result.summary() + "\n" if result.path else result.yaml
    out.print(text, markup=False, emoji=False, highlight=False, end="")
