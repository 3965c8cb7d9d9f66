"""pytorch-ignite, as its users write it: ``idist.Parallel(backend="gloo")`` from torchrun's
environment, ``auto_model``/``auto_optim``/``auto_dataloader``, an ``Engine`` with an
evaluator every VAL_EVERY iterations and a rank-0 ``Checkpoint``; no ddpnet import."""

from __future__ import annotations

import common
import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events, create_supervised_evaluator
from ignite.handlers import Checkpoint, DiskSaver
from ignite.metrics import Loss


def training(_local_rank: int) -> None:
    common.seed()
    world, rank = idist.get_world_size(), idist.get_rank()
    net = common.model()
    model = idist.auto_model(net)
    optimizer = idist.auto_optim(torch.optim.SGD(model.parameters(), lr=common.LR))
    train = idist.auto_dataloader(common.dataset(world), batch_size=common.BATCH * world,
                                  shuffle=False, num_workers=0)
    val = idist.auto_dataloader(common.validation_set(), batch_size=common.BATCH * world,
                                num_workers=0)

    def update(_engine: Engine, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        x, y = batch
        optimizer.zero_grad()
        loss = common.loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return float(loss)

    trainer = Engine(update)
    evaluator = create_supervised_evaluator(model, metrics={"loss": Loss(common.loss_fn)})

    @trainer.on(Events.ITERATION_COMPLETED)
    def lines(engine: Engine) -> None:
        common.on_step(engine.state.iteration, rank)

    @trainer.on(Events.ITERATION_COMPLETED(every=common.VAL_EVERY))
    def validate(engine: Engine) -> None:
        evaluator.run(val)
        common.say(f"validated {engine.state.iteration}")

    saver = Checkpoint({"model": model, "optimizer": optimizer},
                       DiskSaver(common.ckpt_dir(), require_empty=False), n_saved=2)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=common.VAL_EVERY), saver)

    @trainer.on(Events.ITERATION_COMPLETED(every=common.VAL_EVERY))
    def saved(engine: Engine) -> None:
        if rank == 0:
            common.say(f"saved {engine.state.iteration}")

    trainer.run(train, max_epochs=1)
    common.final(net)


if __name__ == "__main__":
    with idist.Parallel(backend="gloo") as parallel:
        parallel.run(training)
