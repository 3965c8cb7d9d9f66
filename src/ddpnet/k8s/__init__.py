"""``ddpnet k8s``: render a Kubernetes job (Kubeflow PyTorchJob or JobSet) that runs a script on
every rank, with ``ddpnet check`` as an init container (docs/k8s.md).

``options`` validates the flags, ``render`` turns them into plain dicts (pure), ``run`` writes
the YAML (edge), ``preflight`` is what the init container runs in the pod.
"""
