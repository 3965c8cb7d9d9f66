"""PyTorch Lightning's Trainer, as its users write it (strategy "ddp" on CPU, its own
init_process_group, validation every VAL_EVERY steps, rank-0 checkpoints by ModelCheckpoint);
no ddpnet import. Lines as in ``common``."""

from __future__ import annotations

import common
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = common.model()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _i: int) -> torch.Tensor:
        x, y = batch
        return common.loss_fn(self.net(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _i: int) -> None:
        x, y = batch
        self.log("val_loss", common.loss_fn(self.net(x), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=common.LR)


class Lines(L.Callback):
    def on_train_batch_end(self, trainer: L.Trainer, *_args: object) -> None:
        common.on_step(trainer.global_step, trainer.global_rank)

    def on_validation_end(self, trainer: L.Trainer, _module: L.LightningModule) -> None:
        common.say(f"validated {trainer.global_step}")

    def on_save_checkpoint(self, trainer: L.Trainer, *_args: object) -> None:
        if trainer.global_rank == 0:
            common.say(f"saved {trainer.global_step}")

    def on_exception(self, trainer: L.Trainer, _module: object, exc: BaseException) -> None:
        common.say(f"exception {type(exc).__name__} sigterm {trainer.received_sigterm}")


def main() -> None:
    common.seed()
    module = Regression()
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=common.local_world(), num_nodes=common.nodes(),
                        max_steps=common.STEPS, val_check_interval=common.VAL_EVERY,
                        callbacks=[Lines(), ModelCheckpoint(dirpath=common.ckpt_dir(),
                                                            every_n_train_steps=common.VAL_EVERY)],
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        deterministic=True, num_sanity_val_steps=0)
    world = common.world()
    trainer.fit(module, DataLoader(common.dataset(world), batch_size=common.BATCH),
                DataLoader(common.validation_set(), batch_size=common.BATCH))
    common.final(module.net)


if __name__ == "__main__":
    main()
