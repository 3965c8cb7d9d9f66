"""Lightning Fabric, as its users write it: ``Fabric(strategy="ddp")``, ``launch()``,
``setup``/``setup_dataloaders``, ``fabric.backward``, an all-reduced validation loss and a
rank-0 ``fabric.save``; no ddpnet import. Lines as in ``common``."""

from __future__ import annotations

import os

import common
import lightning as L
import torch
from torch.utils.data import DataLoader


def main() -> None:
    common.seed()
    world = int(os.environ["WORLD_SIZE"])
    fabric = L.Fabric(accelerator="cpu", strategy="ddp", devices=common.local_world(),
                      num_nodes=common.nodes())
    fabric.launch()
    net = common.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=common.LR)
    model, optimizer = fabric.setup(net, optimizer)
    train, val = fabric.setup_dataloaders(
        DataLoader(common.dataset(world), batch_size=common.BATCH),
        DataLoader(common.validation_set(), batch_size=common.BATCH))
    for step, (x, y) in enumerate(train, start=1):
        optimizer.zero_grad()
        fabric.backward(common.loss_fn(model(x), y))
        optimizer.step()
        common.on_step(step, fabric.global_rank)
        if step % common.VAL_EVERY == 0:
            with torch.no_grad():
                losses = torch.stack([common.loss_fn(model(vx), vy) for vx, vy in val])
            fabric.all_reduce(losses.mean(), reduce_op="mean")
            common.say(f"validated {step}")
            fabric.save(os.path.join(common.ckpt_dir(), f"step{step}.ckpt"),
                        {"model": model, "optimizer": optimizer, "step": step})
            if fabric.global_rank == 0:
                common.say(f"saved {step}")
    common.final(net)


if __name__ == "__main__":
    main()
