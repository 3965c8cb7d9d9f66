"""Ray Train's ``TorchTrainer``, as its users write it: a driver that connects to the Ray
cluster (``RAY_ADDRESS``, else a local one) and runs ``train_loop_per_worker`` on
WORLD workers (``ScalingConfig``, CPU), each preparing its model and data loader
(``prepare_model``/``prepare_data_loader``: Ray's own ``init_process_group``, gloo), validating
every VAL_EVERY steps and reporting a rank-0 checkpoint with ``ray.train.report``; no ddpnet
import. The watch reaches the workers through the raylets' environment (``ray start`` run
with ``python -m ddpnet.attach --env``'s variables). Lines as in ``common``, each prefixed by
Ray's ``(RayTrainWorker pid=..., ip=...)``."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import ray
import torch
from ray import train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer, prepare_data_loader, prepare_model
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
import common


def loop(config: dict[str, int]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    common.seed()
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    net = common.model()
    model = prepare_model(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=common.LR)
    loader = prepare_data_loader(DataLoader(common.dataset(world), batch_size=common.BATCH),
                                 move_to_device=False)
    vx, vy = common.validation_set().tensors
    for step, (x, y) in enumerate(loader, start=1):
        optimizer.zero_grad()
        common.loss_fn(model(x), y).backward()
        optimizer.step()
        common.on_step(step, rank)
        if step % common.VAL_EVERY == 0:
            with torch.no_grad():
                val = common.loss_fn(model(vx), vy)
            torch.distributed.all_reduce(val)
            common.say(f"validated {step}")
            with tempfile.TemporaryDirectory() as tmp:
                checkpoint = None
                if rank == 0:
                    torch.save(net.state_dict(), os.path.join(tmp, "model.pt"))
                    checkpoint = Checkpoint.from_directory(tmp)
                train.report({"val_loss": float(val), "step": step}, checkpoint=checkpoint)
            if rank == 0:
                common.say(f"saved {step}")
    common.final(net)


def main() -> int:
    # the test's knobs reach the workers as a user's variables would: the job's runtime_env
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
             log_to_driver=True, runtime_env={"env_vars": common.knobs()})
    trainer = TorchTrainer(
        loop, scaling_config=ScalingConfig(num_workers=int(os.environ.get("WORLD", "2")),
                                           use_gpu=False,
                                           resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=common.ckpt_dir(), name="ray",
                             failure_config=train.FailureConfig(max_failures=0)))
    try:
        trainer.fit()
    except Exception as exc:  # the run failed: say so, as a user's script would
        common.say(f"failed {type(exc).__name__}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
