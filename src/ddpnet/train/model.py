"""Three small built-in models. ``width`` (and ``depth``) scale the parameter count so the same
command sets up a compute-bound run (small width, big batch) or a comm-bound one (25M parameters,
small batch on a slow link). Inputs are 64 features (the 8x8 digits, or synthetic ones).

No BatchNorm and no dropout on purpose: BatchNorm statistics are per rank (DDP would need
SyncBatchNorm to equal one process), and dropout makes runs differ per rank; both would hide
what the equivalence tests check.
"""

from __future__ import annotations

import torch
from torch import nn

IN_FEATURES = 64
SIDE = 8


def build_model(name: str, width: int, depth: int, num_classes: int) -> torch.nn.Module:
    """The model called ``name``; parameters are initialised from torch's current RNG."""
    if name == "mlp":
        layers: list[nn.Module] = [nn.Linear(IN_FEATURES, width), nn.GELU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.GELU()]
        layers.append(nn.Linear(width, num_classes))
        return nn.Sequential(*layers)
    if name == "cnn":
        return _Cnn(width, depth, num_classes)
    if name == "transformer":
        return _Transformer(width, depth, num_classes)
    raise ValueError(f"unknown model {name!r}")


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class _Cnn(nn.Module):
    """3x3 convolutions over the 8x8 image, then one linear classifier."""

    def __init__(self, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        convs: list[nn.Module] = [nn.Conv2d(1, width, 3, padding=1), nn.GELU()]
        for _ in range(depth - 1):
            convs += [nn.Conv2d(width, width, 3, padding=1), nn.GELU()]
        self.features = nn.Sequential(*convs)
        self.head = nn.Linear(width * SIDE * SIDE, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x.view(-1, 1, SIDE, SIDE))
        out: torch.Tensor = self.head(h.flatten(1))
        return out


class _Transformer(nn.Module):
    """Each of the 8 image rows is a token; pre-norm encoder layers; mean-pooled head."""

    def __init__(self, width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        heads = 4 if width % 4 == 0 else 1
        self.embed = nn.Linear(SIDE, width)
        self.pos = nn.Parameter(torch.zeros(SIDE, width))
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.view(-1, SIDE, SIDE)) + self.pos
        out: torch.Tensor = self.head(self.encoder(h).mean(dim=1))
        return out
