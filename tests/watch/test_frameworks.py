"""A framework whose own launcher starts the ranks with another environment is named in one
line when a watched script imports it (Ray Train), and never in its own workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ddpnet.watch import frameworks
from ddpnet.watch.attach import ranks_env


def test_ray_train_is_noted_in_a_driver_not_in_rays_workers() -> None:
    note = frameworks.due("ray.train", ["train.py"])
    assert note is not None and "raylet" in note.says and "ddpnet.attach --env" in note.says
    assert frameworks.due("ray.train", ["/x/ray/_private/workers/default_worker.py"]) is None
    assert frameworks.due("ray.train", ["train.py"], frozenset({"ray.train"})) is None
    assert frameworks.due("ray", ["train.py"]) is None


@pytest.mark.slow  # a Python that imports Ray Train
def test_a_watched_script_importing_ray_train_gets_the_note_once() -> None:
    env = {**os.environ, **ranks_env(os.environ, True)}
    done = subprocess.run([sys.executable, "-c", "import ray.train, ray.train.torch"],
                          capture_output=True, text=True, env=env, timeout=120)
    notes = [line for line in done.stderr.splitlines() if line.startswith("ddpnet: watch: note")]
    assert done.returncode == 0 and len(notes) == 1 and "Ray Train" in notes[0], done.stderr


def test_an_unwatched_script_gets_no_note() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPNET_WATCH")}
    done = subprocess.run([sys.executable, "-c", "import sys; from ddpnet.watch import frameworks;"
                           " print(any(type(f).__name__ == '_NoteFinder' for f in sys.meta_path))"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
