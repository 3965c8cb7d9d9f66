"""Datasets and the DistributedSampler every rank uses.

``digits`` is scikit-learn's bundled 8x8 handwritten digits (1,797 images shipped inside the
wheel; nothing is downloaded). ``synthetic`` is a seeded 10-class problem with a rule a small
model learns in a few hundred steps, any size, identical on every rank: each sample is 8 tokens
(the 8 rows of the 8x8 input), each token one of 10 symbols (a random code of 8 features plus
noise), and the class is the symbol that occurs most often (the smallest on a tie). The
transformer at its CPU defaults passes 0.8 eval accuracy in 300 steps (chance: 0.1); a random
teacher's labels, used before, left it at 0.19.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

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


#: symbols per token, tokens per sample, features per token (8 x 8 = the models' 64 inputs)
SYMBOLS, TOKENS, TOKEN_FEATURES = NUM_CLASSES, 8, 8
#: noise added to each token's code, relative to the codes' unit scale
TOKEN_NOISE = 0.1


def _synthetic(samples: int, eval_samples: int, seed: int) -> Split:
    gen = torch.Generator().manual_seed(10_000 + seed)
    codes = torch.randn(SYMBOLS, TOKEN_FEATURES, generator=gen)
    n = samples + eval_samples
    ids = torch.randint(0, SYMBOLS, (n, TOKENS), generator=gen)
    x = codes[ids] + TOKEN_NOISE * torch.randn(n, TOKENS, TOKEN_FEATURES, generator=gen)
    x = x.reshape(n, TOKENS * TOKEN_FEATURES)
    x = (x - x.mean()) / x.std()
    y = mode_label(ids)
    return Split(TensorDataset(x[:samples], y[:samples]),
                 TensorDataset(x[samples:], y[samples:]))


def mode_label(ids: torch.Tensor) -> torch.Tensor:
    """The class of each row of symbol ids: the symbol that occurs most often, the smallest
    on a tie (counts are integers, so a tie-break below 1 never overturns a count)."""
    counts = torch.nn.functional.one_hot(ids, SYMBOLS).sum(dim=1).float()
    return (counts - 0.01 * torch.arange(SYMBOLS)).argmax(dim=1)


def make_loader(dataset: TensorDataset, *, batch_size: int, rank: int, world_size: int,
                seed: int) -> tuple[DataLoader[tuple[torch.Tensor, ...]], DistributedSampler[int]]:
    """A loader over this rank's shard. Call ``sampler.set_epoch(e)`` before each epoch, or
    every epoch repeats epoch 0's shuffle (the guides' most common DDP bug).

    ``drop_last=True`` in the sampler keeps every rank on the same number of samples without
    padding duplicates, so the global batch is exactly what one process would see.

    A batch is one indexing of the in-memory tensors by the sampler's next ``batch_size``
    indices (a ``BatchSampler``), not ``batch_size`` single-sample reads and a collate: the
    same samples in the same order, but a 1024-sample batch costs one gather instead of
    ~1024 Python calls (milliseconds a GPU step would wait for).
    """
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    batches = BatchSampler(sampler, batch_size=batch_size, drop_last=True)
    loader: DataLoader[tuple[torch.Tensor, ...]] = DataLoader(
        dataset, sampler=batches, batch_size=None, num_workers=0)
    return loader, sampler
