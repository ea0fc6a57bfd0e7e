"""The simulator's input (``predict.price``) and the planner's screening (``plan.pricing``)
price a tensor-parallel stage with the one model of ``cost.tp``: same compute shares, same
all-reduces, hand-counted for gpt-tiny."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.comm import allreduce_time
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.plan.pricing import Pricing
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict.plan_memory import plan_memory
from hetplan.predict.price import _stage_compute, stage_tp_comm

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
MB = 2  # samples per micro-batch
B, S, H = MB, 64, 128  # gpt-tiny: 64 tokens, hidden 128


def _setup(dtype: str = "fp32") -> tuple[ModelGraph, Cluster, list[str]]:
    graph = build_graph("gpt-tiny", dtype=dtype)
    cluster = load_cluster(CLUSTERS / "homogeneous-4gpu.yaml")
    return graph, cluster, [d.id for d in cluster.devices][:2]


def _plan(graph: ModelGraph, devices: list[str], recompute: bool = False) -> Plan:
    stage = StagePlan(layers=[x.name for x in graph.layers], devices=devices)
    return Plan(
        model=ModelRef(name="gpt-tiny", dtype=graph.dtype),
        strategy="dp",
        global_batch=MB,
        pipelines=[PipelinePlan(stages=[stage], batch=MB)],
        tp=len(devices),
        recompute=recompute,
    )


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("rng", [(0, 5), (1, 3), (4, 5)])
def test_screening_and_predict_price_a_tp_stage_alike(dtype: str, rng: tuple[int, int]) -> None:
    graph, cluster, devices = _setup(dtype)
    compute = AnalyticalCompute()
    devs = [cluster.device(d) for d in devices]
    fwd, bwd, _, _ = _stage_compute(_plan(graph, devices), graph, cluster, compute, devs, rng, MB)
    screen_fwd, screen_bwd = Pricing(graph=graph, cluster=cluster, compute=compute).layers(
        "+".join(devices), MB
    )
    lo, hi = rng
    assert fwd == pytest.approx(float(screen_fwd[lo : hi + 1].sum()), rel=1e-12)
    assert bwd == pytest.approx(list(screen_bwd[lo : hi + 1]), rel=1e-12)


def test_tp_comm_of_a_stage_by_hand() -> None:
    graph, cluster, devices = _setup()
    fwd, bwd = stage_tp_comm(graph, graph.layers, MB, devices, cluster)
    act = allreduce_time(B * S * H * 4, devices, cluster)  # b x s x h fp32
    stat = allreduce_time(B * S * 4, devices, cluster)  # one fp32 per token
    # embed, 4 blocks (attention + MLP; backward q, k, v and up each), head + loss_parallel
    assert fwd == pytest.approx([act, 2 * act, 2 * act, 2 * act, 2 * act, 3 * stat])
    assert bwd == pytest.approx([0.0, 4 * act, 4 * act, 4 * act, 4 * act, act])


def test_recompute_runs_the_forward_allreduces_again() -> None:
    graph, cluster, devices = _setup()
    compute = AnalyticalCompute()
    devs = [cluster.device(d) for d in devices]
    rng = (1, 1)  # one block
    _, plain, _, _ = _stage_compute(_plan(graph, devices), graph, cluster, compute, devs, rng, MB)
    _, redo, _, _ = _stage_compute(
        _plan(graph, devices, recompute=True), graph, cluster, compute, devs, rng, MB
    )
    # A rank's share of the split block: the block at half the micro-batch (cost.tp_compute).
    block_fwd = compute.layer_costs(graph, devs[0], MB / 2)[1].fwd_s
    act = allreduce_time(B * S * H * 4, devices, cluster)
    assert redo[0] - plain[0] == pytest.approx(block_fwd + 2 * act)


def test_a_tp_plan_holds_half_of_the_split_layers_per_rank() -> None:
    graph, cluster, devices = _setup()
    n = len(graph.layers) - 1

    def weights(devs: list[str]) -> float:
        mem = plan_memory(_plan(graph, devs), graph, cluster, [[(0, n)]], [MB], [0.0])
        return mem[devs[0]].breakdown.weights

    # Every gpt-tiny layer splits at tp=2 (the head's weight is the tied embedding's).
    assert weights(devices) == pytest.approx(weights(devices[:1]) / 2)
