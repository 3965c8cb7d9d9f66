"""Hugging Face Accelerate, as its users write it (MULTI_CPU from torchrun's environment):
``Accelerator()``, ``prepare``, ``accelerator.backward``, ``gather_for_metrics`` in
validation, ``save_state`` on every rank (rank 0 writes the model); no ddpnet import."""

from __future__ import annotations

import os

import common
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader


def main() -> None:
    common.seed()
    accelerator = Accelerator(cpu=True)
    world = accelerator.num_processes
    net = common.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=common.LR)
    model, optimizer, train, val = accelerator.prepare(
        net, optimizer, DataLoader(common.dataset(world), batch_size=common.BATCH),
        DataLoader(common.validation_set(), batch_size=common.BATCH))
    for step, (x, y) in enumerate(train, start=1):
        optimizer.zero_grad()
        accelerator.backward(common.loss_fn(model(x), y))
        optimizer.step()
        common.on_step(step, accelerator.process_index)
        if step % common.VAL_EVERY == 0:
            with torch.no_grad():
                outs, ys = [], []
                for vx, vy in val:
                    out, target = accelerator.gather_for_metrics((model(vx), vy))
                    outs.append(out)
                    ys.append(target)
            accelerator.reduce(common.loss_fn(torch.cat(outs), torch.cat(ys)), "mean")
            common.say(f"validated {step}")
            accelerator.save_state(os.path.join(common.ckpt_dir(), f"step{step}"))
            if accelerator.is_main_process:
                common.say(f"saved {step}")
    common.final(accelerator.unwrap_model(model))


if __name__ == "__main__":
    main()
