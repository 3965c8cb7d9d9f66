"""``ddpnet k8s``: render a Kubeflow PyTorchJob or a JobSet that runs a script on every rank."""

from __future__ import annotations

import click

from ddpnet.cli.flags import iface_option, program_target


@click.command("k8s", context_settings={"ignore_unknown_options": True,
                                        "allow_interspersed_args": False})
@click.option("--nodes", type=int, required=True, help="Pods (one per node).")
@click.option("--gpus-per-node", type=int, default=0, show_default=True,
              help="GPUs per pod, one rank each (0: a CPU job, no GPU requested).")
@click.option("--nproc-per-node", type=int, default=None,
              help="Ranks per pod (default: --gpus-per-node, or 1 without GPUs).")
@click.option("--image", required=True, help="Container image with torch and ddpnet.")
@click.option("--name", default="ddpnet", show_default=True, help="Job name (a DNS label).")
@click.option("--kind", type=click.Choice(["pytorchjob", "jobset"]), default="pytorchjob",
              show_default=True, help="Kubeflow PyTorchJob or JobSet.")
@click.option("--namespace", default=None, help="Namespace (default: kubectl's).")
@click.option("--shm-size", default="8Gi", show_default=True,
              help="/dev/shm size (memory-backed) for data loaders and NCCL.")
@iface_option("iface", "Pod network interface for GLOO/NCCL/TP_SOCKET_IFNAME.",
              default="eth0", show_default=True)
@click.option("--check/--no-check", default=True, show_default=True,
              help="Run `ddpnet check` as an init container in every pod.")
@click.option("--check-timeout", type=int, default=300, show_default=True,
              help="Seconds the check waits for the master's name and for every pod.")
@click.option("--master-port", type=int, default=29500, show_default=True)
@click.option("--python", default="python3", show_default=True,
              help="The Python in the image that has ddpnet.")
@click.option("--validate", is_flag=True,
              help="Check every object against the official models (pip install 'ddpnet[k8s]').")
@click.option("-o", "--output", "path", type=click.Path(dir_okay=False), default=None,
              help="Write the YAML here instead of stdout.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (objects, yaml).")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
def command(nodes: int, gpus_per_node: int, nproc_per_node: int | None, image: str,
            name: str, kind: str, namespace: str | None, shm_size: str, iface: str,
            check: bool, check_timeout: int,
            master_port: int, python: str, validate: bool, path: str | None, as_json: bool,
            program: tuple[str, ...]) -> int:
    """Render a ready job that runs SCRIPT (or -m MODULE) on every rank: a headless service,
    the job, /dev/shm, GPUs, the pod network's interface, and `ddpnet check` first.

    \b
    ddpnet k8s --nodes 2 --gpus-per-node 8 --image my/train:1 -- train.py > job.yaml
    ddpnet k8s --kind jobset --nodes 4 --gpus-per-node 8 --image my/train:1 -o job.yaml \\
        -- train.py --epochs 3
    """
    from ddpnet.k8s.options import K8sOptions
    from ddpnet.k8s.run import K8sRun, run, show
    from ddpnet.output import finish

    options = K8sOptions(
        target=program_target(program), nodes=nodes, gpus_per_node=gpus_per_node,
        nproc=nproc_per_node, image=image,
        name=name, kind=kind, namespace=namespace, shm_size=shm_size, iface=iface, check=check,
        check_timeout=check_timeout, master_port=master_port, python=python)
    return finish(run(K8sRun(options, path, validate)), as_json, show)
