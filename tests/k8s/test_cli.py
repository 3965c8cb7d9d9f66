"""``ddpnet k8s`` end to end (the real CLI in a subprocess): YAML on stdout, ``--json``,
``-o FILE``, ``--validate``; ``ddpnet --help`` lists it without importing yaml or kubernetes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import RunCli, assert_user_error

JOB = ["k8s", "--nodes", "2", "--gpus-per-node", "4", "--image", "reg.example/train:1",
       "--name", "gpt"]


def test_yaml_on_stdout_is_the_service_and_the_pytorchjob(run_cli: RunCli) -> None:
    proc = run_cli(*JOB, "--", "train.py", "--epochs", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# Rendered by `ddpnet k8s`: PyTorchJob gpt, 2 pod(s) x 4 GPU")
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Service", "gpt-rdzv"), ("PyTorchJob", "gpt")]
    cmd = docs[1]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"]
    assert cmd[-4:] == ["0", "train.py", "--epochs", "3"]  # after --max-restarts


def test_json_has_the_objects_and_the_same_yaml(run_cli: RunCli) -> None:
    proc = run_cli(*JOB, "--kind", "jobset", "--json", "--", "-m", "pkg.train")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["kind"] == "jobset" and out["path"] is None and out["validated"] is False
    assert [o["kind"] for o in out["objects"]] == ["JobSet"]
    assert list(yaml.safe_load_all(out["yaml"])) == out["objects"]


def test_output_file_gets_the_yaml_and_stdout_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    proc = run_cli(*JOB, "-o", str(target), "--", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"wrote {target}: Service gpt-rdzv, PyTorchJob gpt\n"
    again = run_cli(*JOB, "--", "train.py")
    assert target.read_text() == again.stdout


def test_validate_checks_against_the_official_models(run_cli: RunCli, tmp_path: Path) -> None:
    pytest.importorskip("kubeflow.training", reason="pip install 'ddpnet[k8s]'")
    for kind in ("pytorchjob", "jobset"):
        proc = run_cli(*JOB, "--kind", kind, "--validate", "--json", "--", "train.py")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert (out["validated"], out["problems"]) == (True, [])


def test_no_check_renders_the_job_alone(run_cli: RunCli) -> None:
    proc = run_cli(*JOB, "--no-check", "--json", "--", "train.py")
    (job,) = json.loads(proc.stdout)["objects"]
    assert job["kind"] == "PyTorchJob"
    assert "initContainers" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"][
        "spec"]


def test_a_bad_name_is_one_line_and_exit_2(run_cli: RunCli) -> None:
    assert_user_error(run_cli(*JOB[:-1], "My_Job", "--", "train.py"), 2,
                      "--name 'My_Job' is not a DNS label")


def test_no_script_is_refused(run_cli: RunCli) -> None:
    assert_user_error(run_cli(*JOB), 2, "nothing to launch")


def test_help_lists_k8s_without_importing_yaml_or_kubernetes() -> None:
    code = ("import sys\nfrom ddpnet.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('yaml', 'kubernetes', 'kubeflow')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert "k8s" in proc.stdout and "Render a Kubernetes PyTorchJob or JobSet" in proc.stdout
    assert proc.stdout.strip().endswith("[]"), proc.stdout


def test_k8s_help_documents_the_flags(run_cli: RunCli) -> None:
    proc = run_cli("k8s", "--help")
    for flag in ("--nodes", "--gpus-per-node", "--image", "--kind", "--namespace",
                 "--shm-size", "--iface", "--check / --no-check", "--validate", "--output"):
        assert flag in proc.stdout, flag


def test_validate_without_the_models_says_how_to_get_them(run_cli: RunCli,
                                                          tmp_path: Path) -> None:
    """A ``kubeflow`` package that cannot be imported, first on the path: exit 3, the extra."""
    (tmp_path / "kubeflow").mkdir()
    (tmp_path / "kubeflow" / "__init__.py").write_text(
        "raise ImportError('blocked by the test', name='kubeflow')\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    proc = run_cli(*JOB, "--validate", "--", "train.py", env={"PYTHONPATH": path})
    assert_user_error(proc, 3, "--validate needs the Kubernetes models (kubeflow is missing)",
                      "pip install 'ddpnet[k8s]'")
    assert proc.stdout == ""


@pytest.mark.parametrize("kind", ["pytorchjob", "jobset"])
def test_a_cpu_job_needs_no_gpu_flag_and_requests_no_gpu(run_cli: RunCli, kind: str) -> None:
    """``--gpus-per-node`` defaults to 0 (it was required: "Missing option"); the rendered
    pods then request no GPU and run --nproc-per-node ranks each."""
    proc = run_cli("k8s", "--nodes", "2", "--nproc-per-node", "2", "--image",
                   "reg.example/train:1", "--kind", kind, "--", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert "2 pod(s) x no GPU" in proc.stdout
    text = proc.stdout
    assert "nvidia.com/gpu" not in text
    containers = [c for doc in yaml.safe_load_all(text) for c in _containers(doc)]
    train = [c for c in containers if "torch.distributed.run" in c.get("command", [])]
    assert train and all(
        c["command"][c["command"].index("--nproc-per-node") + 1] == "2" for c in train)
    assert all("resources" not in c for c in containers)


def test_more_ranks_than_gpus_is_refused(run_cli: RunCli) -> None:
    proc = run_cli("k8s", "--nodes", "2", "--gpus-per-node", "2", "--nproc-per-node", "4",
                   "--image", "reg.example/train:1", "--", "train.py")
    assert_user_error(proc, 2, "--nproc-per-node 4", "share a GPU")


def _containers(doc: object) -> list[dict[str, object]]:
    """Every container (and init container) anywhere in a rendered object."""
    found: list[dict[str, object]] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found.extend(v for v in value if isinstance(v, dict))
            else:
                found.extend(_containers(value))
    elif isinstance(doc, list):
        for value in doc:
            found.extend(_containers(value))
    return found
