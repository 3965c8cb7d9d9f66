"""The training run's configuration: a frozen dataclass built from flags and validated before
any process group exists, so a bad combination exits 2 with a hint on every rank at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ddpnet.errors import ConfigError

MODELS = ("mlp", "cnn", "transformer")
DATASETS = ("synthetic", "digits")
AMP_MODES = ("off", "bf16", "fp16")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one rank needs to train; identical on every rank."""

    model: str = "mlp"
    width: int = 64
    depth: int = 2
    dataset: str = "synthetic"
    samples: int = 4096
    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    #: None: the model's default (ddpnet.train.optim.DEFAULTS: 0.05 SGD, 1e-3 AdamW)
    lr: float | None = None
    momentum: float = 0.9
    #: auto: SGD for mlp/cnn, AdamW with warmup and clipping for the transformer
    optimizer: str = "auto"
    #: None: the model's default; 0: no warmup
    warmup_steps: int | None = None
    #: gradient-norm clip; None: the model's default; 0: no clipping
    clip_grad: float | None = None
    seed: int = 0
    grad_accum: int = 1
    bucket_cap_mb: float = 25.0
    amp: str = "off"
    comm_hook: str = "none"
    powersgd_rank: int = 4
    powersgd_start_iter: int = 2
    static_graph: bool = False
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    log_every: int = 10
    eval_samples: int = 1024
    device: str = "auto"
    #: process-group timeout (s): a hung connect or collective fails the rank instead of
    #: blocking forever, so an elastic agent can restart the group
    pg_timeout_s: float = 300.0
    #: sleep per optimizer step (fault drills and demos only; hidden flag)
    step_sleep_s: float = 0.0
    #: ``--monitor``: sample network telemetry every this many seconds on every rank
    #: (0 = off); rank 0 adds each rank's summary to the training summary
    monitor_interval_s: float = 0.0
    #: ``--metrics-port``: rank 0's watch hub serves the job's Prometheus metrics there
    #: (None: not served; ``DDPNET_METRICS_PORT`` too)
    metrics_port: int | None = None
    #: after a preemption checkpoint (SIGUSR1/SIGTERM), rank 0 runs ``scontrol requeue
    #: $SLURM_JOB_ID`` (docs/train.md "Preemption"); needs ``checkpoint_dir``
    requeue_on_signal: bool = False
    #: CUDA: fp32 matmuls on TF32 tensor cores (``--no-tf32``: full fp32); no effect on CPU
    tf32: bool = True
    #: ``--compile``: torch.compile the model's forward (in place) before training
    compile: bool = False
    #: "flags", or which device's defaults (``ddpnet.train.defaults``) set the size fields
    #: the flags left open, e.g. "cuda defaults"
    sized_by: str = "flags"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(cfg: TrainConfig, *,
             cuda_available: bool | Callable[[], bool]) -> TrainConfig:
    """Reject combinations that would crash deep inside torch or silently train wrong."""
    _check_names_and_sizes(cfg)
    _check_optimisation(cfg)
    _check_comm_hook(cfg)
    _check_checkpoints(cfg)
    _check_timing(cfg)
    _check_bounds(cfg)
    # last: asking torch about CUDA imports torch (seconds), so flag errors come first
    has_cuda = cuda_available() if callable(cuda_available) else cuda_available
    device = device_kind(cfg.device, cuda_available=has_cuda)
    if cfg.amp == "fp16" and device != "cuda":
        raise ConfigError(
            "--amp fp16 needs a CUDA device (fp16 autocast with GradScaler); this run is on CPU",
            "use --amp bf16 on CPU, or run on a node with a GPU",
        )
    return cfg


def device_kind(device: str, *, cuda_available: bool) -> str:
    """"cuda" or "cpu" as ``ddpnet.init()`` will choose for ``--device`` (the one choice,
    ``process_group.pick_backend``); an explicit ``cuda`` without a GPU is a ConfigError.
    Only CUDA's presence is known here: a CUDA build of torch is taken to have NCCL, as
    every Linux one does (init() decides with the real facts)."""
    from ddpnet.process_group import pick_backend

    gpus = 1 if cuda_available else 0
    return pick_backend("auto", gpus, cuda_available, device).device


def _check_names_and_sizes(cfg: TrainConfig) -> None:
    if cfg.model not in MODELS:
        raise ConfigError(f"unknown --model {cfg.model!r}", f"choose one of {', '.join(MODELS)}")
    if cfg.dataset not in DATASETS:
        raise ConfigError(f"unknown --dataset {cfg.dataset!r}",
                          f"choose one of {', '.join(DATASETS)}")
    for name, value in (("--width", cfg.width), ("--depth", cfg.depth),
                        ("--batch-size", cfg.batch_size), ("--epochs", cfg.epochs),
                        ("--grad-accum", cfg.grad_accum), ("--samples", cfg.samples)):
        if value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value}",
                              f"pass {name} 1 or more")
    if cfg.max_steps is not None and cfg.max_steps < 1:
        raise ConfigError(f"--max-steps must be positive, got {cfg.max_steps}",
                          "omit --max-steps to train for --epochs")
    if not (cfg.monitor_interval_s == 0 or 0.05 <= cfg.monitor_interval_s <= 3600):
        raise ConfigError(f"--monitor-interval must be between 0.05 and 3600 s, got "
                          f"{cfg.monitor_interval_s}", "e.g. --monitor --monitor-interval 1")


def _check_optimisation(cfg: TrainConfig) -> None:
    from ddpnet.train.optim import OPTIMIZERS

    if cfg.lr is not None and cfg.lr <= 0:
        raise ConfigError(f"--lr must be positive, got {cfg.lr}",
                          "try --lr 0.05 (SGD) or 1e-3 (AdamW), or omit it for the default")
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError(f"unknown --optimizer {cfg.optimizer!r}",
                          f"choose one of {', '.join(OPTIMIZERS)}")
    for name, value in (("--warmup-steps", cfg.warmup_steps), ("--clip-grad", cfg.clip_grad)):
        if value is not None and value < 0:
            raise ConfigError(f"{name} must be 0 or more, got {value}",
                              f"0 turns it off; omit {name} for the model's default")
    if cfg.bucket_cap_mb <= 0:
        raise ConfigError(f"--bucket-cap-mb must be positive, got {cfg.bucket_cap_mb}",
                          "DDP's default is 25 (MB); larger buckets mean fewer all-reduces")
    if cfg.amp not in AMP_MODES:
        raise ConfigError(f"unknown --amp {cfg.amp!r}", f"choose one of {', '.join(AMP_MODES)}")


def _check_comm_hook(cfg: TrainConfig) -> None:
    if cfg.comm_hook not in COMM_HOOKS:
        raise ConfigError(f"unknown --comm-hook {cfg.comm_hook!r}",
                          f"choose one of {', '.join(COMM_HOOKS)}")
    if cfg.comm_hook != "powersgd":
        if cfg.powersgd_rank != 4:
            raise ConfigError("--powersgd-rank only applies to --comm-hook powersgd",
                              "add --comm-hook powersgd or drop --powersgd-rank")
        return
    if cfg.powersgd_rank < 1:
        raise ConfigError(
            f"--powersgd-rank must be a positive integer, got {cfg.powersgd_rank}",
            "PowerSGD approximates each gradient matrix with this rank; 1-8 is typical, "
            "try --powersgd-rank 4",
        )
    if cfg.powersgd_start_iter < 2:
        raise ConfigError(
            f"--powersgd-start-iter must be at least 2, got {cfg.powersgd_start_iter}",
            "DDP rebuilds its buckets after the first step; PowerSGD with error feedback "
            "must start after that",
        )


def _check_checkpoints(cfg: TrainConfig) -> None:
    if cfg.checkpoint_every < 0:
        raise ConfigError(f"--checkpoint-every must be 0 or more, got {cfg.checkpoint_every}",
                          "0 disables periodic checkpoints")
    if cfg.checkpoint_every > 0 and not cfg.checkpoint_dir:
        raise ConfigError("--checkpoint-every needs --checkpoint-dir",
                          "add --checkpoint-dir DIR (a path every rank can reach; rank 0 writes)")
    if cfg.keep_checkpoints < 1:
        raise ConfigError(f"--keep-checkpoints must be at least 1, got {cfg.keep_checkpoints}",
                          "keep at least the newest checkpoint")
    if cfg.requeue_on_signal and not cfg.checkpoint_dir:
        raise ConfigError("--requeue-on-signal (or DDPNET_REQUEUE_ON_SIGNAL) needs "
                          "--checkpoint-dir: a requeued job would start again from step 0",
                          "add --checkpoint-dir DIR on a disk the restarted job sees")


def _check_timing(cfg: TrainConfig) -> None:
    if cfg.log_every < 1:
        raise ConfigError(f"--log-every must be positive, got {cfg.log_every}", "try 10")
    if cfg.pg_timeout_s <= 0:
        raise ConfigError(f"--pg-timeout must be positive, got {cfg.pg_timeout_s}",
                          "seconds before a stuck collective fails the rank, e.g. 300")
    if cfg.step_sleep_s < 0:
        raise ConfigError("--step-sleep must be 0 or more", "seconds to sleep per step")


#: bounds on what a user can make big (docs/train.md): flag -> (lowest, highest)
LIMITS: dict[str, tuple[float, float]] = {
    "--width": (1, 16384), "--depth": (1, 256), "--samples": (1, 10_000_000),
    "--eval-samples": (1, 10_000_000), "--batch-size": (1, 1_000_000),
    "--epochs": (1, 1_000_000), "--grad-accum": (1, 10_000), "--max-steps": (1, 10**9),
    "--lr": (1e-12, 1e6), "--bucket-cap-mb": (1e-3, 16384), "--pg-timeout": (1e-3, 86400),
    "--step-sleep": (0, 3600), "--keep-checkpoints": (1, 10_000),
}


def _check_bounds(cfg: TrainConfig) -> None:
    """Absurd, NaN or infinite values would exhaust memory or overflow torch's timedelta."""
    values = {"--width": cfg.width, "--depth": cfg.depth, "--samples": cfg.samples,
              "--eval-samples": cfg.eval_samples, "--batch-size": cfg.batch_size,
              "--epochs": cfg.epochs, "--grad-accum": cfg.grad_accum,
              "--max-steps": cfg.max_steps, "--lr": cfg.lr, "--bucket-cap-mb": cfg.bucket_cap_mb,
              "--pg-timeout": cfg.pg_timeout_s, "--step-sleep": cfg.step_sleep_s,
              "--keep-checkpoints": cfg.keep_checkpoints}
    for flag, value in values.items():
        low, high = LIMITS[flag]
        if value is not None and not low <= value <= high:  # nan fails too
            raise ConfigError(f"{flag} {value:g} is outside {low:g}..{high:g}",
                              f"pass {flag} within {low:g}..{high:g} (docs/train.md)")


@dataclass(frozen=True)
class TrainOptions:
    """One ``ddpnet train`` invocation: the run's configuration, ``--local N`` (None: this
    process is one rank of a launcher's job) and ``--json``."""

    config: TrainConfig
    local: int | None = None
    as_json: bool = False
    #: size fields whose flag was not given (``ddpnet.train.defaults.SIZE_FIELDS``): the
    #: device's defaults fill them once the device is known
    open_sizes: frozenset[str] = frozenset()


def sized(cfg: TrainConfig, open_sizes: frozenset[str], device: str) -> TrainConfig:
    """``cfg`` with the fields in ``open_sizes`` set to ``device``'s defaults for its model
    (pure); ``sized_by`` names the device when any were."""
    from dataclasses import replace

    from ddpnet.train.defaults import sizes_for

    if not open_sizes:
        return cfg
    kind = "cuda" if device.startswith("cuda") else "cpu"
    values: dict[str, Any] = {k: v for k, v in sizes_for(cfg.model, kind).values().items()
                              if k in open_sizes}
    return replace(cfg, **values, sized_by=f"{kind} defaults")
