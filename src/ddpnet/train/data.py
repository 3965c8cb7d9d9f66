"""Datasets and the DistributedSampler every rank uses.

``digits`` is scikit-learn's bundled 8x8 handwritten digits (1,797 images shipped inside the
wheel; nothing is downloaded). ``synthetic`` is a seeded 10-class problem labelled by a random
two-layer teacher, any size, identical on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

NUM_CLASSES = 10


@dataclass(frozen=True)
class Split:
    train: TensorDataset
    eval: TensorDataset


def load_dataset(name: str, *, samples: int, eval_samples: int, seed: int) -> Split:
    """Train and eval splits; the same on every rank (seeded, no per-rank randomness)."""
    if name == "digits":
        return _digits(seed)
    if name == "synthetic":
        return _synthetic(samples, eval_samples, seed)
    raise ValueError(f"unknown dataset {name!r}")


def _digits(seed: int) -> Split:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(np.asarray(bunch.data), dtype=torch.float32) / 16.0
    y = torch.tensor(np.asarray(bunch.target), dtype=torch.long)
    x = (x - x.mean()) / x.std()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(len(x) * 0.8)
    train, held = order[:cut], order[cut:]
    return Split(TensorDataset(x[train], y[train]), TensorDataset(x[held], y[held]))


def _synthetic(samples: int, eval_samples: int, seed: int) -> Split:

    gen = torch.Generator().manual_seed(10_000 + seed)
    w1 = torch.randn(64, 32, generator=gen)
    w2 = torch.randn(32, NUM_CLASSES, generator=gen)
    x = torch.randn(samples + eval_samples, 64, generator=gen)
    y = (torch.tanh(x @ w1 / 8.0) @ w2).argmax(dim=1)
    return Split(TensorDataset(x[:samples], y[:samples]),
                 TensorDataset(x[samples:], y[samples:]))


def make_loader(dataset: TensorDataset, *, batch_size: int, rank: int, world_size: int,
                seed: int) -> tuple[DataLoader[tuple[torch.Tensor, ...]], DistributedSampler[int]]:
    """A loader over this rank's shard. Call ``sampler.set_epoch(e)`` before each epoch, or
    every epoch repeats epoch 0's shuffle (the guides' most common DDP bug).

    ``drop_last=True`` in the sampler keeps every rank on the same number of samples without
    padding duplicates, so the global batch is exactly what one process would see.
    """
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                        num_workers=0)
    return loader, sampler
