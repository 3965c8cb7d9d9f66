"""GPU facts compared by rank 0 (pure, injected facts): ranks sharing a GPU under NCCL,
GPUs/drivers that differ between nodes, NCCL settings that differ (issue 19)."""

from __future__ import annotations

from typing import Any

from ddpnet.check.causes import CAUSE_ORDER, sort_causes
from ddpnet.check.compare import NodeFacts
from ddpnet.check.gpu import compare_gpu_facts, compare_gpus, compare_nccl_settings, share_gpu

H100 = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_capability": "9.0", "driver": "580.65",
        "persistence_mode": "on"}


def node(rank: int, host: str, local_rank: int, count: int, uuid: str | None = None,
         **more: Any) -> NodeFacts:
    index = local_rank if local_rank < count else None
    facts: dict[str, Any] = {"hostname": host, "address": f"10.0.0.{rank + 1}",
                             "gpu_count": count, "gpu_index": index, "local_rank": local_rank,
                             **(H100 if index is not None else {}), **more}
    if index is not None:
        facts["gpu_uuid"] = uuid or f"GPU-{host}-{index}"
    return NodeFacts(rank, facts)


def test_two_local_ranks_on_one_gpu_share_it() -> None:
    """`check --local 2 --backend nccl` on a one-GPU machine: named from the facts."""
    nodes = [node(0, "gpu1", 0, 1), node(1, "gpu1", 1, 1)]
    [cause] = share_gpu(nodes)
    assert cause.id == "ranks-share-gpu" and cause.severity == "fail"
    assert cause.ranks == (0, 1) and cause.stage == "facts"
    assert "gpu1: 2 ranks (0,1) on 1 visible GPU(s): local rank(s) 1 have none" in cause.detail
    assert "one rank per visible GPU" in cause.fix


def test_two_ranks_on_the_same_uuid_share_it_and_one_gpu_each_does_not() -> None:
    same = [node(0, "n1", 0, 2, uuid="GPU-aaa"), node(1, "n1", 1, 2, uuid="GPU-aaa")]
    [cause] = share_gpu(same)
    assert "ranks 0,1 all use GPU GPU-aaa" in cause.detail
    assert share_gpu([node(0, "n1", 0, 2), node(1, "n1", 1, 2)]) == []


def test_ranks_on_different_hosts_may_use_gpu_0_each() -> None:
    """Two lab nodes (own hostnames) on one physical GPU: NCCL sees two hosts."""
    nodes = [node(0, "lab-a", 0, 1, uuid="GPU-same"), node(1, "lab-b", 0, 1, uuid="GPU-same")]
    assert share_gpu(nodes) == []


def test_only_nccl_cares_and_cpu_nodes_say_nothing() -> None:
    nodes = [node(0, "gpu1", 0, 1), node(1, "gpu1", 1, 1)]
    assert [c.id for c in compare_gpus(nodes, "nccl")] == ["ranks-share-gpu"]
    assert compare_gpus(nodes, "gloo") == []
    cpu = [NodeFacts(r, {"hostname": "c", "gpu_count": 0, "gpu_index": None, "local_rank": r})
           for r in (0, 1)]
    [cause] = share_gpu(cpu)  # nccl on a CPU node: none of the ranks has a GPU
    assert "on 0 visible GPU(s)" in cause.detail
    assert share_gpu([NodeFacts(0, {"hostname": "old"})]) == []  # no GPU facts reported


def test_the_shared_gpu_is_the_root_cause_before_the_group_failure() -> None:
    from ddpnet.check.causes import Cause

    later = Cause("process-group-failed", "rank 1: ncclInvalidUsage", "fix")
    [shared] = share_gpu([node(0, "g", 0, 1), node(1, "g", 1, 1)])
    assert sort_causes([later, shared])[0].id == "ranks-share-gpu"
    assert CAUSE_ORDER.index("ranks-share-gpu") < CAUSE_ORDER.index("process-group-failed")


def test_gpu_facts_that_differ_are_a_warning_naming_the_minority() -> None:
    nodes = [node(0, "a", 0, 1), node(1, "b", 0, 1),
             node(2, "c", 0, 1, driver="550.54", persistence_mode="off")]
    [cause] = compare_gpu_facts(nodes)
    assert cause.id == "gpu-mismatch" and cause.severity == "warn" and cause.ranks == (2,)
    assert "driver differs: driver 580.65 on rank(s) 0,1; driver 550.54 on rank(s) 2" \
        in cause.detail
    assert "persistence_mode differs" in cause.detail and "nvidia-smi -pm 1" in cause.fix
    a100 = node(1, "b", 0, 1, gpu_name="NVIDIA A100", gpu_capability="8.0")
    [mixed] = compare_gpu_facts([node(0, "a", 0, 1), a100])
    assert "gpu_name differs" in mixed.detail and "gpu_capability differs" in mixed.detail
    assert compare_gpu_facts(nodes[:2]) == []


def test_nccl_transport_settings_must_agree() -> None:
    ib = {"NCCL_NET": "IB", "NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0"}
    sock = {"NCCL_NET": "Socket", "NCCL_IB_HCA": "mlx5_1", "NCCL_SOCKET_IFNAME": "ens5"}
    nodes = [NodeFacts(0, {"hostname": "a", "nccl_settings": ib}),
             NodeFacts(1, {"hostname": "b", "nccl_settings": sock}),
             NodeFacts(2, {"hostname": "c", "nccl_settings": {}})]
    fail, warn = compare_nccl_settings(nodes)
    assert (fail.id, fail.severity, warn.severity) == ("nccl-setting-mismatch", "fail", "warn")
    assert "NCCL_NET: rank 0 IB, rank 1 Socket, rank 2 (unset)" in fail.detail
    assert "NCCL_IB_HCA" in warn.detail and "NCCL_IB_HCA" not in fail.detail
    assert "NCCL_SOCKET_IFNAME" not in fail.detail + warn.detail  # names differ per node
    same = [NodeFacts(r, {"hostname": h, "nccl_settings": {"NCCL_NET": "IB"}})
            for r, h in ((0, "a"), (1, "b"))]
    assert compare_nccl_settings(same) == []
