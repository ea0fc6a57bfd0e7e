"""ZeRO-1 (``fsdp`` with ``zero: 1``) priced against hand counts and torch's own partition:
the owners of the optimizer state, the broadcasts after the step, and a rank's step and
memory beside data parallelism's."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
from torch.distributed.optim import ZeroRedundancyOptimizer

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Link
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.sharded import zero1_partition
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict
from hetplan.predict.check import stage_ranges
from hetplan.predict.price import price
from hetplan.predict.zero1 import (
    GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE,
    broadcasts_s,
    owned_fractions,
)
from hetplan.run.setup.model import ZooSource

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"


def _torch_partition(elements: list[int], n: int) -> list[list[int]]:
    """torch's ``ZeroRedundancyOptimizer._partition_parameters`` on tensors of ``elements``
    elements, run on an instance built without a process group (the method reads only the
    world size and the parameter groups)."""
    tensors = [torch.empty(k) for k in elements]
    zero = object.__new__(ZeroRedundancyOptimizer)
    zero.world_size = n
    zero.param_groups = [{"params": tensors}]
    zero._partition_parameters_cache = []
    index = {id(t): i for i, t in enumerate(tensors)}
    return [[index[id(t)] for g in groups for t in g["params"]] for groups in
            zero._partition_parameters()]  # fmt: skip


def test_partition_by_hand() -> None:
    # 120 | 60 + 12 | 60 + 10 + 5: largest first, each to the emptiest rank, lowest on ties
    assert zero1_partition([60, 10, 120, 12, 60, 5], 3) == [[2], [0, 3], [4, 1, 5]]


def test_partition_is_torchs() -> None:
    rng = random.Random(7)
    for _ in range(50):
        elements = [rng.choice([1, 5, 64, 64, 300, 4096]) for _ in range(rng.randint(1, 30))]
        n = rng.randint(1, 5)
        assert zero1_partition(elements, n) == _torch_partition(elements, n)


@pytest.mark.parametrize("model", ["resnet-tiny", "gpt-tiny", "vgg11"])
def test_owned_fractions_follow_torchs_partition_of_the_module(model: str) -> None:
    """The graph's tensors, in layer order, partition as torch partitions the built module's
    parameters (tied weights once)."""
    dataset = "cifar10" if model != "gpt-tiny" else None
    ref = ModelRef(name=model, dataset=dataset)
    module = ZooSource(name=model, dataset=dataset).build(0, "cpu")
    elements = [p.numel() for p in module.parameters()]
    for n in (2, 3, 4):
        owned = _torch_partition(elements, n)
        expected = [sum(elements[i] for i in mine) / sum(elements) for mine in owned]
        assert owned_fractions(build_graph(ref), n) == pytest.approx(expected, rel=1e-6)


def test_broadcasts_on_gpus_by_hand() -> None:
    """Two ranks of a GPU cluster, fp32: each owner's bytes once over the link plus one hop's
    latency, plus the cluster's overhead per broadcast."""
    cluster = load_cluster(CLUSTERS / "homogeneous-4gpu.yaml")
    devices = [d.id for d in cluster.devices][:2]
    graph = build_graph(ModelRef(name="vgg11", dataset="cifar10"))
    link = cluster.link(devices[0], devices[1])
    total = graph.total_param_bytes
    expected = 2 * link.latency_s + total / link.bandwidth + 2 * cluster.collective_overhead_s
    assert broadcasts_s(devices, graph, cluster) == pytest.approx(expected, rel=1e-6)


def test_broadcasts_on_gloo_are_the_measured_ratio_of_an_all_reduce() -> None:
    cluster = load_cluster(CLUSTERS / "local-cpu.yaml")
    cluster = dataclasses.replace(cluster, collective_overhead_s=0.0)
    devices = [d.id for d in cluster.devices]
    graph = build_graph(ModelRef(name="vgg11", dataset="cifar10"))
    # a collective's step: the pair's link under the cluster's measured latency cap
    link: Link = cluster.collective_link(cluster.link(devices[0], devices[1]))
    assert link.latency_s < cluster.link(devices[0], devices[1]).latency_s  # the cap is seen
    total = graph.total_param_bytes
    all_reduce = 2 * (link.latency_s + total / (2 * link.bandwidth))  # 2 ranks: 2 steps
    got = broadcasts_s(devices, graph, cluster)
    assert got == pytest.approx(GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE * all_reduce, rel=1e-6)


def test_a_rank_steps_and_holds_its_owned_share() -> None:
    """Beside dp on the same devices and batches: each rank's optimizer state is its owned
    fraction of dp's, and its step its owned fraction of dp's plus the broadcasts."""
    cluster = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    ref = ModelRef(name="vgg11", dataset="cifar10")
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    plans = {
        z: plan_from_options(graph, cluster, model=ref, strategy=s, batch=32, optimizer="adam",
                             compute=compute, zero=z)
        for s, z in (("dp", None), ("fsdp", 1))
    }  # fmt: skip
    assert [p.batch for p in plans[1].pipelines] == [p.batch for p in plans[None].pipelines]
    dp, z1 = (predict(plans[k], graph, cluster, compute) for k in (None, 1))
    shares = owned_fractions(graph, len(cluster.devices))
    sync = broadcasts_s([d.id for d in cluster.devices], graph, cluster)
    for a, b, share in zip(dp.devices, z1.devices, shares, strict=True):
        assert b.memory["optimizer"] == pytest.approx(a.memory["optimizer"] * share)
        assert b.memory["weights"] == pytest.approx(a.memory["weights"])
    steps = {
        k: [p.stages[0].opt_s for p in price(plans[k], graph, cluster, compute,
                                             stage_ranges(plans[k], graph)).pipes]
        for k in (None, 1)
    }  # fmt: skip
    assert steps[1] == pytest.approx(
        [s * f + sync for s, f in zip(steps[None], shares, strict=True)]
    )
