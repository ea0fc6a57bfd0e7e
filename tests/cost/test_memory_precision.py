"""Mixed precision (model dtype bf16/fp16: autocast over fp32 master weights): memory and
gradient traffic counted by hand on a two-layer graph, in ``stage_memory``, ``predict`` and
the planner's screening, which must agree."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.memory import (
    MemoryBreakdown,
    cast_cache_bytes,
    grad_scale,
    grad_tensor_bytes,
    is_mixed_precision,
    stage_memory,
    weight_scale,
)
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.plan.candidates import grad_bytes
from hetplan.plan.pricing import Pricing
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import plan_from_options, predict
from hetplan.predict.check import stage_ranges
from hetplan.predict.price import price
from hetplan.schedule.work import PricedWork

ELEM = {"fp32": 4, "bf16": 2, "fp16": 2}  # bytes per element of the traced graph
ClusterFactory = Callable[..., Cluster]  # the ``make_cluster`` fixture (tests/cost/conftest.py)
PARAMS = (1000, 500)
SAVED_FP32 = (100, 60)  # bytes per sample kept for backward, in fp32
CUT_FP32 = 40  # bytes per sample crossing the cut, in fp32


def two_layers(dtype: str, flops: tuple[float, float] = (1.0, 1.0)) -> ModelGraph:
    """Two layers traced in ``dtype``: parameter and activation bytes at its element size."""
    e = ELEM[dtype]
    layers = tuple(
        LayerInfo(
            name=f"l{i}",
            fwd_flops=flops[i],
            bwd_flops=2 * flops[i],
            params=PARAMS[i],
            param_bytes=e * PARAMS[i],
            param_tensor_bytes=(e * PARAMS[i],),
            out_bytes=CUT_FP32 * e // 4,
            saved_bytes=SAVED_FP32[i] * e // 4,
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )
        for i in range(2)
    )
    return ModelGraph(
        name="syn",
        input_shape=(1,),
        input_bytes=4,
        dtype=dtype,
        layers=layers,
        cut_bytes=(CUT_FP32 * e // 4,),
    )


def adam(dtype: str, flops: tuple[float, float] = (1.0, 1.0)) -> MemoryBreakdown:
    g = two_layers(dtype, flops)
    return stage_memory(
        g.layers, micro_batch=4, in_flight=1, optimizer="adam", dtype=dtype, framework_bytes=0
    )


# ------------------------------------------------------------------------- stage_memory


def test_fp32_adam_is_16_bytes_per_parameter_plus_activations() -> None:
    m = adam("fp32")
    n = 1500
    assert (m.weights, m.grads, m.optimizer, m.cast_cache) == (4 * n, 4 * n, 8 * n, 0)
    assert m.activations == (100 + 60) * 4
    # backward: the gradients of one layer's output and input (2 x 40 B x 4 samples)
    assert m.backward_workspace == 2 * 40 * 4
    assert m.total == 16 * n + 640 + 320


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mixed_adam_is_4_4_8_2_bytes_per_parameter_plus_low_precision_activations(
    dtype: str,
) -> None:
    m = adam(dtype)
    n = 1500
    # fp32 master weights 4 B, fp32 gradients 4 B, two fp32 Adam slots 8 B, autocast's
    # 2-byte weight copy (both layers have matmul FLOPs); activations at 2 B per element.
    assert m.weights == 4 * n
    assert m.grads == 4 * n
    assert m.optimizer == 8 * n
    assert m.cast_cache == 2 * n
    assert m.activations == (50 + 30) * 4
    assert m.backward_workspace == 2 * 20 * 4  # bf16 activation gradients
    assert m.total == (4 + 4 + 8 + 2) * n + 320 + 160


def test_layers_without_matmul_flops_get_no_cast_copy() -> None:
    # l1 stands for an embedding or a norm (no FlopCounterMode FLOPs): autocast runs it in
    # fp32 and keeps no cast of its weights.
    m = adam("bf16", flops=(1.0, 0.0))
    assert m.cast_cache == 2 * 1000
    assert m.total == 16 * 1500 + 2 * 1000 + 320 + 160


def test_tensor_parallel_stash_and_buckets_in_mixed_precision() -> None:
    g = two_layers("bf16")
    # Both layers as tensor parallelism splits them (one unit each, 2 heads).
    split = [dataclasses.replace(x, tp_units=1, tp_split=2) for x in g.layers]
    m = stage_memory(
        split,
        micro_batch=2,
        in_flight=3,
        optimizer="momentum",
        dtype="bf16",
        tp=2,
        stashed_versions=2,
        framework_bytes=0,
    )
    per_rank = 750  # parameters per TP rank
    assert m.weights == m.grads == 4 * per_rank
    assert m.optimizer == 4 * per_rank  # one fp32 momentum buffer
    # Autocast is entered per micro-batch forward: each of the 3 in flight keeps its copy.
    assert m.cast_cache == 3 * 2 * per_rank
    assert m.stashed_weights == 2 * 4 * per_rank  # fp32 weight versions
    assert m.activations == 80 * 2 * 3 / 2


def test_recomputation_keeps_one_cast_copy() -> None:
    g = two_layers("bf16")
    m = stage_memory(
        g.layers,
        micro_batch=2,
        in_flight=3,
        optimizer="sgd",
        dtype="bf16",
        recompute=True,
        input_bytes=10,
        framework_bytes=0,
    )
    assert m.cast_cache == 2 * 1500  # only the micro-batch being recomputed holds one
    assert m.activations == 10 * 2 * 3 + 80 * 2


def test_scales_and_helpers() -> None:
    assert [is_mixed_precision(d) for d in ("fp32", "tf32", "bf16", "fp16")] == [
        False,
        False,
        True,
        True,
    ]
    assert (weight_scale("fp32"), grad_scale("fp32")) == (1.0, 1.0)
    assert (weight_scale("bf16"), grad_scale("fp16")) == (2.0, 2.0)
    g = two_layers("bf16")
    assert grad_tensor_bytes(g.layers, "bf16") == [(4000,), (2000,)]  # fp32 gradients
    assert grad_tensor_bytes(two_layers("fp32").layers, "fp32") == [(4000,), (2000,)]
    assert cast_cache_bytes(g.layers[0], "bf16") == 2000
    assert cast_cache_bytes(two_layers("fp32").layers[0], "fp32") == 0
    with pytest.raises(ValueError, match="dtype"):
        weight_scale("fp8")


# ---------------------------------------------------------------- predict and the planner


def _plan(
    graph: ModelGraph, clus: Cluster, strategy: str, micro_batches: int | None = None
) -> Plan:
    return plan_from_options(
        graph,
        clus,
        model=ModelRef(name="syn", dtype=graph.dtype),
        strategy=strategy,
        batch=8,
        optimizer="adam",
        micro_batches=micro_batches,
    )


def _price(plan: Plan, graph: ModelGraph, clus: Cluster) -> PricedWork:
    compute = AnalyticalCompute(graph.dtype)
    return price(plan, graph, clus, compute, stage_ranges(plan, graph))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_dp_gradients_are_fp32_under_mixed_precision(
    dtype: str, make_cluster: ClusterFactory
) -> None:
    graph, clus = two_layers(dtype), make_cluster([2])
    priced = _price(_plan(graph, clus, "dp"), graph, clus)
    # DDP all-reduces fp32 gradients: 1500 params x 4 B whatever the traced dtype (the bf16
    # graph's parameter bytes are 3000).
    assert sum(b.nbytes for b in priced.buckets[0]) == 1500 * 4
    assert priced.bucket_bytes == [1500 * 4]
    # The planner's hybrid allreduce term counts the same bytes.
    assert grad_bytes(graph) == 1500 * 4


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_predict_memory_by_hand_and_screening_agrees(
    dtype: str, make_cluster: ClusterFactory
) -> None:
    graph, clus = two_layers(dtype), make_cluster([2])
    pred = predict(_plan(graph, clus, "dp"), graph, clus, AnalyticalCompute(dtype))
    act = sum(SAVED_FP32) * ELEM[dtype] // 4 * 4  # 4 samples per replica
    cast = 2 * 1500 if dtype != "fp32" else 0
    # weights + grads + Adam + DDP bucket copy (fp32 gradients) + cast copy + activations
    held = (4 + 4 + 8 + 4) * 1500 + cast + act
    screen = Pricing(graph=graph, cluster=clus, compute=AnalyticalCompute(dtype))
    layer_mem = screen.layer_mem(4, 1, "adam", synced=True)
    # The screening sums per-layer terms, an upper bound. predict takes the step's phases
    # (predict/backward_peak.py): the one bucket (both layers' fp32 gradients) is complete at
    # the end of the backward, when the activations and the workspace are freed; then it
    # holds weights, Adam, gradients and bucket, 20 B per parameter (1500 of them), with
    # autocast's copies: more than the backward of l0 (activations 100 x 4 samples, workspace
    # 2 x 40 x 4, gradients of both layers 6000 B, no bucket yet).
    assert float(layer_mem.sum()) == pytest.approx(held, rel=1e-12)
    assert len(pred.devices) == 2
    for dev in pred.devices:
        assert dev.memory["cast_cache"] == cast
        assert dev.memory.get("backward_workspace", 0) == 0
        assert dev.memory.get("activations", 0) == 0
        assert dev.memory_bytes - dev.memory["framework"] == held - act
        assert dev.memory_bytes - dev.memory["framework"] <= float(layer_mem.sum())


def test_ps_shards_and_traffic_are_fp32_under_mixed_precision(
    make_cluster: ClusterFactory,
) -> None:
    graph, clus = two_layers("bf16"), make_cluster([2])
    plan = _plan(graph, clus, "ps")
    pred = predict(plan, graph, clus, AnalyticalCompute("bf16"))
    # The shard hosts are the workers: their shards are the workers' own fp32 weights and
    # gradients; hosting adds the two fp32 Adam slots.
    assert sum(d.memory["ps_shard"] for d in pred.devices) == 1500 * 8
    assert {w.nbytes for w in _price(plan, graph, clus).ps} == {1500 * 4}  # fp32 push, pull


def test_gpipe_stages_keep_a_cast_copy_per_micro_batch(make_cluster: ClusterFactory) -> None:
    graph, clus = two_layers("bf16"), make_cluster([2])
    pred = predict(_plan(graph, clus, "gpipe", micro_batches=2), graph, clus, AnalyticalCompute())
    # GPipe keeps both micro-batches in flight on each one-layer stage.
    assert [d.memory["cast_cache"] for d in pred.devices] == [2 * 2 * 1000, 2 * 2 * 500]
    screen = Pricing(graph=graph, cluster=clus, compute=AnalyticalCompute())
    layer_mem = screen.layer_mem(4, 2, "adam")  # 2 micro-batches of 4 samples in flight
    # Stage-level terms predict adds: 2 bf16 activation gradients (2 x 20 B x 4 samples) and,
    # accumulating 2 micro-batches, the layer's fp32 gradients once more (1000 and 500
    # parameters x 4 B); on stage 1 the received input kept for both (20 B x 4 x 2).
    assert [d.memory["backward_workspace"] for d in pred.devices] == [160 + 4000, 160 + 2000]
    assert [d.memory.get("stage_inputs", 0) for d in pred.devices] == [0, 160]
    # The last stage reads the batch too (8 samples of 4 B); stage 0's first layer saves
    # its micro-batches' inputs already.
    assert [d.memory.get("input_batch", 0) for d in pred.devices] == [0, 32]
    for i, dev in enumerate(pred.devices):
        extra = dev.memory["framework"] + dev.memory["backward_workspace"]
        extra += dev.memory.get("stage_inputs", 0) + dev.memory.get("input_batch", 0)
        assert dev.memory_bytes - extra == pytest.approx(layer_mem[i])


def test_pipeline_cut_stays_low_precision(make_cluster: ClusterFactory) -> None:
    graph, clus = two_layers("bf16"), make_cluster([2])
    priced = _price(_plan(graph, clus, "gpipe", micro_batches=2), graph, clus)
    assert priced.pipes[0].cuts[0].nbytes == (CUT_FP32 // 2) * 4  # bf16, 4 samples each


def test_a_tied_projection_keeps_a_cast_copy_of_the_shared_weight() -> None:
    # The embedding owns the tied weight but has no matmul FLOPs; the output projection that
    # multiplies by it keeps autocast's 2-byte copy of it.
    emb, out = two_layers("bf16", flops=(0.0, 1.0)).layers
    tied = dataclasses.replace(out, params=0, param_bytes=0, shared_params=1000)
    assert cast_cache_bytes(emb, "bf16") == 0
    assert cast_cache_bytes(tied, "bf16") == 2 * 1000
