"""DeepSpeed on its CPU accelerator, as its users write it: ``deepspeed.init_distributed``
(gloo: the CPU accelerator's ccl needs oneCCL), ``deepspeed.initialize`` with a ZeRO stage 0
config, ``engine.backward``/``engine.step``, an evaluation every VAL_EVERY steps and
``save_checkpoint`` on every rank; no ddpnet import."""

from __future__ import annotations

import os

import common
import deepspeed
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    common.seed()
    deepspeed.init_distributed(dist_backend="gloo")
    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    net = common.model()
    engine, _optimizer, _loader, _sched = deepspeed.initialize(
        model=net, optimizer=torch.optim.SGD(net.parameters(), lr=common.LR),
        config={"train_micro_batch_size_per_gpu": common.BATCH,
                "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 0},
                "steps_per_print": 10 ** 9, "wall_clock_breakdown": False})
    data = common.dataset(world)
    train = DataLoader(data, batch_size=common.BATCH,
                       sampler=DistributedSampler(data, num_replicas=world, rank=rank,
                                                  shuffle=False))
    for step, (x, y) in enumerate(train, start=1):
        loss = common.loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()
        common.on_step(step, rank)
        if step % common.VAL_EVERY == 0:
            vx, vy = common.validation_set().tensors
            with torch.no_grad():
                val = common.loss_fn(engine(vx), vy)
            torch.distributed.all_reduce(val)
            common.say(f"validated {step}")
            engine.save_checkpoint(os.path.join(common.ckpt_dir(), "ds"), tag=f"step{step}")
            if rank == 0:
                common.say(f"saved {step}")
    common.final(net)


if __name__ == "__main__":
    main()
