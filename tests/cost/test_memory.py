"""Stage memory breakdown (in-flight counts: tests/planspec/test_strategies.py)."""

from __future__ import annotations

import dataclasses

import pytest

from hetplan.cost.memory import stage_memory
from hetplan.graph.types import LayerInfo


def layer(name: str, params: int, param_bytes: int, saved: int) -> LayerInfo:
    return LayerInfo(
        name=name,
        fwd_flops=0,
        bwd_flops=0,
        params=params,
        param_bytes=param_bytes,
        out_bytes=0,
        saved_bytes=saved,
        fwd_io_bytes=0,
        bwd_io_bytes=0,
    )


TOY = [layer("a", 1000, 4000, 100), layer("b", 500, 2000, 50)]


def test_two_layer_toy_by_hand() -> None:
    m = stage_memory(TOY, micro_batch=4, in_flight=3, optimizer="adam", framework_bytes=0)
    assert m.weights == 6000
    assert m.grads == 6000
    assert m.optimizer == 1500 * 2 * 4  # two fp32 slots per parameter
    assert m.activations == 150 * 4 * 3
    assert m.total == 6000 + 6000 + 12000 + 1800


def test_recompute_stash_buffers_framework() -> None:
    m = stage_memory(
        TOY,
        micro_batch=4,
        in_flight=3,
        optimizer="momentum",
        recompute=True,
        input_bytes=20,
        stashed_versions=2,
        bucket_bytes=777,
        framework_bytes=1000,
    )
    # Stage input per in-flight micro-batch + one micro-batch's saved activations.
    assert m.activations == 20 * 4 * 3 + 150 * 4
    assert m.optimizer == 1500 * 4
    assert m.stashed_weights == 2 * 6000
    assert m.comm_buffers == 777
    assert m.total == 6000 * 2 + 6000 + 840 + 12000 + 777 + 1000


def split(info: LayerInfo) -> LayerInfo:
    """``info`` as a layer tensor parallelism splits (one unit, 4 heads)."""
    return dataclasses.replace(info, tp_units=1, tp_split=4, tp_tokens=1, tp_hidden=1)


def test_tensor_parallel_and_mixed_precision() -> None:
    half = [split(layer("a", 1000, 2000, 100)), split(layer("b", 500, 1000, 50))]
    m = stage_memory(
        half, micro_batch=2, in_flight=1, optimizer="adam", dtype="bf16", tp=2, framework_bytes=0
    )
    # Mixed precision on 750 params per rank: fp32 master weights and gradients (4 B each),
    # two fp32 Adam slots; no FLOPs in these layers, so no autocast weight copies.
    assert m.weights == m.grads == 750 * 4
    assert m.optimizer == 750 * 8
    assert m.cast_cache == 0
    assert m.activations == 150 * 2 / 2


def test_tensor_parallel_holds_replicated_layers_whole() -> None:
    # "a" splits at tp=2 (its 4 heads divide), "b" has no unit: every rank holds it whole.
    mixed = [split(layer("a", 1000, 4000, 100)), layer("b", 500, 2000, 50)]
    m = stage_memory(mixed, micro_batch=2, in_flight=1, optimizer="sgd", tp=2, framework_bytes=0)
    assert m.weights == m.grads == 4000 / 2 + 2000
    assert m.activations == (100 / 2 + 50) * 2
    # At tp=8 the 4 heads do not divide: "a" is replicated too.
    m8 = stage_memory(mixed, micro_batch=2, in_flight=1, optimizer="sgd", tp=8, framework_bytes=0)
    assert m8.weights == 6000
    sgd = stage_memory(TOY, micro_batch=1, in_flight=1, optimizer="sgd", framework_bytes=0)
    assert sgd.optimizer == 0


def test_bad_optimizer() -> None:
    with pytest.raises(ValueError, match="optimizer"):
        stage_memory(TOY, micro_batch=1, in_flight=1, optimizer="lion")
