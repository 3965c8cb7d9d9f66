"""The Hugging Face ``transformers`` Trainer, as its users write it: a tiny model built from a
config (no download), ``TrainingArguments`` with evaluation and rank-0 saves every VAL_EVERY
steps, its own init_process_group from torchrun's environment; no ddpnet import."""

from __future__ import annotations

import os

import common
import torch
from torch.utils.data import Dataset
from transformers import (
    PretrainedConfig,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


class RegressionConfig(PretrainedConfig):
    model_type = "ddpnet-regression"


class Regression(PreTrainedModel):
    config_class = RegressionConfig

    def __init__(self, config: RegressionConfig) -> None:
        super().__init__(config)
        self.net = common.model()

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = self.net(x)
        return {"loss": common.loss_fn(out, labels), "logits": out} if labels is not None \
            else {"logits": out}


class Rows(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, tensors: tuple[torch.Tensor, ...]) -> None:
        self.x, self.y = tensors

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


class Lines(TrainerCallback):
    def on_step_end(self, args: TrainingArguments, state: object, control: object,
                    **_kw: object) -> None:
        common.on_step(state.global_step, args.process_index)  # type: ignore[attr-defined]

    def on_evaluate(self, args: TrainingArguments, state: object, control: object,
                    **_kw: object) -> None:
        common.say(f"validated {state.global_step}")  # type: ignore[attr-defined]

    def on_save(self, args: TrainingArguments, state: object, control: object,
                **_kw: object) -> None:
        if args.process_index == 0:
            common.say(f"saved {state.global_step}")  # type: ignore[attr-defined]


def main() -> None:
    common.seed()
    world = int(os.environ["WORLD_SIZE"])
    model = Regression(RegressionConfig())
    args = TrainingArguments(
        output_dir=common.ckpt_dir(), max_steps=common.STEPS,
        per_device_train_batch_size=common.BATCH, per_device_eval_batch_size=common.BATCH,
        learning_rate=common.LR, lr_scheduler_type="constant", optim="sgd",
        weight_decay=0.0, eval_strategy="steps", eval_steps=common.VAL_EVERY,
        save_strategy="steps", save_steps=common.VAL_EVERY,
        logging_strategy="no", report_to=[], use_cpu=True, seed=common.SEED,
        dataloader_num_workers=0, disable_tqdm=True, ddp_backend="gloo")
    trainer = Trainer(model=model, args=args, train_dataset=Rows(common.dataset(world).tensors),
                      eval_dataset=Rows(common.validation_set().tensors), callbacks=[Lines()])
    trainer.train()
    common.final(model.net)


if __name__ == "__main__":
    main()
