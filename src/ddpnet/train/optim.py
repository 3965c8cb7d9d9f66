"""How a run optimises (pure, no torch): per-model defaults that converge, the learning rate
at each step (linear warmup), and the verdict on a non-finite loss or gradient norm.

SGD with momentum at lr 0.05 trains the mlp and the cnn; a transformer at that rate diverges
to NaN (issue 19: width 512, depth 4, batch 256 on an H100, fp32 and bf16), so it defaults to
AdamW with warmup and gradient clipping, as transformers are trained."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.errors import TrainingDiverged

OPTIMIZERS = ("auto", "sgd", "adamw")


@dataclass(frozen=True)
class ModelDefaults:
    """What ``auto`` means for one model."""

    optimizer: str
    lr: float
    #: warmup as a share of the run's steps, capped by ``warmup_cap`` (0: none)
    warmup_share: float = 0.0
    warmup_cap: int = 0
    #: gradient-norm clip (0: none)
    clip: float = 0.0
    weight_decay: float = 0.0


DEFAULTS: dict[str, ModelDefaults] = {
    "mlp": ModelDefaults("sgd", 0.05),
    "cnn": ModelDefaults("sgd", 0.05),
    "transformer": ModelDefaults("adamw", 1e-3, warmup_share=0.1, warmup_cap=100, clip=1.0,
                                 weight_decay=0.01),
}


@dataclass(frozen=True)
class OptimPlan:
    """The optimiser of a run as resolved from the flags and the model's defaults."""

    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    warmup_steps: int
    clip: float

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based): linear warmup to ``lr``,
        then constant. A function of the step alone, so a resumed run gets it right."""
        if step >= self.warmup_steps:
            return self.lr
        return self.lr * (step + 1) / (self.warmup_steps + 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(model: str, total_steps: int, *, optimizer: str = "auto", lr: float | None = None,
         momentum: float = 0.9, warmup_steps: int | None = None,
         clip: float | None = None) -> OptimPlan:
    """The run's optimiser (pure): the flags where given, else the model's defaults. A flag
    set to a non-default optimiser takes that optimiser's plain settings (no warmup/clip
    unless asked)."""
    base = DEFAULTS[model]
    name = base.optimizer if optimizer == "auto" else optimizer
    own = name == base.optimizer
    if warmup_steps is None:
        warmup_steps = (min(base.warmup_cap, int(total_steps * base.warmup_share))
                        if own else 0)
    return OptimPlan(
        optimizer=name,
        lr=lr if lr is not None else (base.lr if own else DEFAULTS_BY_OPTIMIZER[name]),
        momentum=momentum,
        weight_decay=base.weight_decay if own else 0.0,
        warmup_steps=warmup_steps,
        clip=clip if clip is not None else (base.clip if own else 0.0),
    )


#: the learning rate of an optimiser chosen against its model's default
DEFAULTS_BY_OPTIMIZER = {"sgd": 0.05, "adamw": 1e-3}


def divergence(step: int, rank: int, host: str, *, loss: float, grad_norm: float | None,
               p: OptimPlan, amp: str) -> TrainingDiverged | None:
    """The error that stops training when this step's loss or (all-reduced, so the same on
    every rank) gradient norm is not finite; None while both are (pure)."""
    if math.isfinite(loss) and (grad_norm is None or math.isfinite(grad_norm)):
        return None
    what = (f"loss is {loss}" if not math.isfinite(loss)
            else f"gradient norm is {grad_norm}")
    return TrainingDiverged(
        f"rank {rank} ({host}): training diverged at step {step}: {what} "
        f"({p.optimizer}, lr {p.lr:g}, amp {amp})",
        divergence_hint(p, amp))


def divergence_hint(p: OptimPlan, amp: str) -> str:
    """What to try, most likely first."""
    tips = [f"lower --lr (now {p.lr:g}, e.g. --lr {p.lr / 10:g})"]
    if amp == "fp16":
        tips.append("use --amp bf16 instead of fp16 (fp16 overflows)")
    if not p.clip:
        tips.append("clip gradients (--clip-grad 1.0)")
    if not p.warmup_steps:
        tips.append("warm up (--warmup-steps 100)")
    return "; ".join(tips)
