"""Parameter-server and input-batch memory terms (issue 26, item 4), counted by hand on a
two-layer graph: what a PS host keeps, a PS rank's flat buffers, a worker without optimizer
state, and the batches a stage that reads data holds."""

from __future__ import annotations

import pytest

from hetplan.cost.memory import (
    batches_held,
    input_batch_bytes,
    model_input_saved,
    ps_flat_bytes,
    ps_shard_scale,
    stage_input_kept,
    stage_memory,
)
from hetplan.graph.types import LayerInfo

PARAMS = (1000, 500)


def _layers(dtype_bytes: int = 4, saved: tuple[int, int] = (100, 60)) -> list[LayerInfo]:
    return [
        LayerInfo(
            name=f"l{i}",
            fwd_flops=1.0,
            bwd_flops=2.0,
            params=PARAMS[i],
            param_bytes=dtype_bytes * PARAMS[i],
            param_tensor_bytes=(dtype_bytes * PARAMS[i],),
            out_bytes=10,
            saved_bytes=saved[i],
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )
        for i in range(2)
    ]


@pytest.mark.parametrize(
    ("dtype", "optimizer", "worker", "asynchronous", "per_param"),
    [
        # synchronous, on a worker: the shard is the worker's own tensors; Adam's 2 slots
        ("fp32", "adam", True, False, 8),
        ("fp32", "sgd", True, False, 0),
        # synchronous server-only: weights 4 + gradients 4 + slots
        ("fp32", "adam", False, False, 4 + 4 + 8),
        ("fp32", "momentum", False, False, 4 + 4 + 4),
        # asynchronous: master copies (weights, a gradient, slots) and three flat fp32 copies
        # of the shard (the receiver's posted buffer, a push, the reply) on any host; a
        # server-only rank also keeps the shard its module was built from
        ("fp32", "adam", True, True, 4 + 4 + 8 + 3 * 4),
        ("fp32", "adam", False, True, 4 + 4 + 4 + 8 + 3 * 4),
        ("fp32", "sgd", True, True, 4 + 4 + 3 * 4),
        ("bf16", "adam", True, True, 4 + 4 + 8 + 3 * 4),
        # bf16: everything fp32 (2 x the graph's 2-byte parameters)
        ("bf16", "adam", True, False, 8),
        ("bf16", "adam", False, False, 4 + 4 + 8),
    ],
)
def test_what_a_host_keeps_per_parameter(
    dtype: str, optimizer: str, worker: bool, asynchronous: bool, per_param: int
) -> None:
    graph_bytes = 4 if dtype == "fp32" else 2
    scale = ps_shard_scale(dtype, optimizer, worker=worker, asynchronous=asynchronous)
    assert scale * graph_bytes == per_param


@pytest.mark.parametrize(("dtype_bytes", "dtype"), [(4, "fp32"), (2, "bf16")])
def test_flat_buffers_are_every_gradient_in_fp32(dtype_bytes: int, dtype: str) -> None:
    assert ps_flat_bytes(_layers(dtype_bytes), dtype) == 1500 * 4


def test_a_ps_worker_keeps_no_state_and_its_buffers_reuse_the_freed_activations() -> None:
    layers = _layers()
    # 4 samples: activations 160 x 4 = 640, backward workspace 2 x 10 x 4 = 80 (720 freed
    # before the push).
    small = stage_memory(
        layers,
        micro_batch=4,
        in_flight=1,
        optimizer="adam",
        optimizer_state=False,
        ps_buffers=500,
        framework_bytes=0,
    )
    assert small.optimizer == 0
    assert small.comm_buffers == 0  # 500 B of flat buffers fit where 720 B were freed
    assert small.total == 4 * 1500 + 4 * 1500 + 640 + 80
    big = stage_memory(
        layers,
        micro_batch=4,
        in_flight=1,
        optimizer="adam",
        optimizer_state=False,
        ps_buffers=6000,
        framework_bytes=0,
    )
    assert big.comm_buffers == 6000 - 720
    assert big.total == 4 * 1500 + 4 * 1500 + 6000


def test_the_first_layer_saves_the_model_input_when_it_has_weights() -> None:
    first = _layers()[0]
    assert model_input_saved(first, 12) == 12
    assert model_input_saved(first, 500) == 100  # at most what it saves
    no_weights = LayerInfo(
        name="flatten", fwd_flops=0.0, bwd_flops=0.0, params=0, param_bytes=0,
        out_bytes=10, saved_bytes=0, fwd_io_bytes=0, bwd_io_bytes=0,
    )  # fmt: skip
    assert model_input_saved(no_weights, 12) == 0


def test_stage_input_kept_by_hand() -> None:
    # 3 micro-batches of 2 samples in flight, 12 B saved of a 20 B input per sample.
    assert stage_input_kept(12, 20, micro_batch=2, in_flight=3, recompute=False) == 12 * 2 * 3
    # recompute: every in-flight input whole, and the recomputed one's first layer input
    assert stage_input_kept(12, 20, micro_batch=2, in_flight=3, recompute=True) == 20 * 6 + 12 * 2


def test_input_batches_beyond_the_kept_inputs() -> None:
    # PipeDream's first stage, batch 32, 2 iterations' batches alive, 12288 B per sample
    # (a CIFAR image), 2 micro-batches of 8 kept by the stem: 64 - 16 samples.
    assert input_batch_bytes(12288, 64, 12288 * 16) == 12288 * 48
    assert input_batch_bytes(12288, 32) == 12288 * 32  # a last stage keeps none of it
    assert input_batch_bytes(10, 4, 100) == 0  # never below 0
    m = stage_memory(_layers(), micro_batch=1, in_flight=1, optimizer="sgd", batch_bytes=77)
    assert m.input_batch == 77


def test_batches_held_across_an_iteration_end() -> None:
    assert batches_held(continuous=False, in_flight=4, micro_batches=4) == 1  # flushed
    # PipeDream: the next iteration's first forward runs before this one's last backward
    # whenever two or more micro-batches are in flight.
    assert batches_held(continuous=True, in_flight=1, micro_batches=4) == 1
    assert batches_held(continuous=True, in_flight=2, micro_batches=4) == 2
    assert batches_held(continuous=True, in_flight=5, micro_batches=4) == 2
    assert batches_held(continuous=True, in_flight=6, micro_batches=2) == 4  # 1 + ceil(5/2)
