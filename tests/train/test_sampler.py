"""The DistributedSampler partitions the data: disjoint per rank, covering, reshuffled by
set_epoch, identical across ranks for the same epoch."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from ddpnet.train.data import load_dataset, make_loader


def _indices(n: int, world: int, epoch: int, seed: int = 0) -> list[list[int]]:
    ds = TensorDataset(torch.arange(n).float().unsqueeze(1), torch.zeros(n, dtype=torch.long))
    shards = []
    for rank in range(world):
        _, sampler = make_loader(ds, batch_size=4, rank=rank, world_size=world, seed=seed)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [64, 100])
def test_shards_are_disjoint_and_cover(world: int, n: int) -> None:
    shards = _indices(n, world, epoch=0)
    flat = [i for shard in shards for i in shard]
    assert len(flat) == len(set(flat)), "a sample went to two ranks"
    assert all(len(s) == n // world for s in shards), "ranks see different sample counts"
    # drop_last drops fewer than `world` samples, never duplicates them
    assert set(flat) <= set(range(n)) and n - len(flat) < world


def test_set_epoch_reshuffles_and_is_deterministic() -> None:
    a0, a1 = _indices(64, 2, epoch=0), _indices(64, 2, epoch=1)
    assert a0 != a1, "set_epoch did not change the order"
    assert a0 == _indices(64, 2, epoch=0), "the same epoch must give the same order everywhere"


def test_union_of_first_batches_is_one_process_batch() -> None:
    """Why DDP on N ranks equals one process on N times the batch."""
    world, batch = 4, 4
    shards = _indices(64, world, epoch=0)
    union = sorted(i for s in shards for i in s[:batch])
    single = sorted(_indices(64, 1, epoch=0)[0][: world * batch])
    assert union == single


def test_datasets_are_identical_on_every_rank_and_digits_is_bundled() -> None:
    a = load_dataset("digits", samples=0, eval_samples=0, seed=0)
    b = load_dataset("digits", samples=0, eval_samples=0, seed=0)
    assert torch.equal(a.train.tensors[0], b.train.tensors[0])
    assert len(a.train) + len(a.eval) == 1797 and a.train.tensors[0].shape[1] == 64
    s = load_dataset("synthetic", samples=256, eval_samples=64, seed=3)
    labels = s.train.tensors[1]
    assert len(s.train) == 256 and len(s.eval) == 64
    assert len(labels.unique()) >= 5, "the synthetic labels should use most classes"


def test_a_batch_is_the_samplers_next_indices_in_order() -> None:
    """One gather per batch (BatchSampler) yields exactly the per-sample loader's batches."""
    from torch.utils.data import DataLoader

    ds = TensorDataset(torch.arange(100).float().unsqueeze(1), torch.arange(100))
    for rank in range(2):
        loader, sampler = make_loader(ds, batch_size=8, rank=rank, world_size=2, seed=1)
        sampler.set_epoch(3)
        per_sample = DataLoader(ds, batch_size=8, sampler=sampler, drop_last=True)
        got = [(x.clone(), y.clone()) for x, y in loader]
        want = list(per_sample)
        assert len(loader) == len(got) == len(want) == 50 // 8
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            assert torch.equal(gx, wx) and torch.equal(gy, wy) and gx.shape == (8, 1)


def test_the_synthetic_label_is_the_most_frequent_symbol() -> None:
    from ddpnet.train.data import mode_label

    ids = torch.tensor([[3, 3, 1, 2, 5, 6, 7, 8],    # 3 twice
                        [9, 4, 4, 9, 0, 1, 2, 6],    # tie 4/9: the smaller
                        [0, 1, 2, 3, 4, 5, 6, 7],    # all once: 0
                        [9, 9, 9, 8, 8, 8, 8, 1]])   # 8 four times
    assert mode_label(ids).tolist() == [3, 4, 0, 8]
    s = load_dataset("synthetic", samples=4096, eval_samples=0, seed=0)
    counts = torch.bincount(s.train.tensors[1], minlength=10)
    assert int(counts.min()) > 4096 // 40, counts  # every class is common, none dominates
