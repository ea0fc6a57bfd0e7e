"""What DTensor's dispatch costs the host of a CPU rank (FSDP2's parameters, TP's modules).

Every op on a DTensor goes through its Python dispatch (sharding propagation, wrapping,
redistribution) before the local kernel runs. On a GPU rank the host issues ahead of the
device and this hides under the kernels; on a CPU rank the same core does both, so it adds:

- **The optimizer step over DTensor parameters** (FSDP2's shards, TP's split modules): torch's
  optimizers loop over the parameters on CPU tensors (foreach is the default only on CUDA:
  ``torch.optim.optimizer._default_to_fused_or_foreach``), so every tensor pays the dispatch,
  :data:`DTENSOR_STEP_S_PER_TENSOR`.
- **Tensor parallelism's modules** (``parallelize_module``'s ``ColwiseParallel`` and
  ``RowwiseParallel`` Linears, the vocabulary pair's embedding and head): each call and its
  backward dispatch a handful of DTensor ops, :data:`DTENSOR_TP_MODULE_S` per module and
  micro-batch, over the rank's speed share (a core shared by two ranks takes twice as long).

GPU ranks are charged nothing (not measured: no GPU here).
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cluster.spec import Device
from hetplan.cost.sharded import layer_tensors
from hetplan.cost.tp import tp_share
from hetplan.graph.types import LayerInfo

DTENSOR_STEP_S_PER_TENSOR = 160e-6
"""Seconds per DTensor parameter tensor per optimizer step on a CPU rank, beyond the same step
over plain tensors (Adam, one thread): 96-208 us, median 160, measured on this project's 2-core
CPU machine with ``benchmarks/bench_fsdp_optimizer.py`` (gpt-tiny 68 tensors, resnet-tiny 20;
2026-11-25, docs/benchmarks.md)."""
DTENSOR_TP_MODULE_S = (0.29e-3, 0.56e-3)
"""Seconds (forward, backward) per TP-split module per micro-batch on a CPU rank with a core
to itself, beyond the module's local compute and its all-reduces: ``benchmarks/
bench_tp_dispatch.py --shape mlp`` (8 MLP units 64 -> 256 -> 64 at 256 tokens, 2 gloo ranks,
one thread; 2026-11-29, docs/benchmarks.md), five runs a core each (forward 135-399 us per
Linear, backward 343-777) and five on one shared core (561-909 and 556-2821, halved for the
speed share); medians over the ten, 292 and 559 us."""


def vocab_modules(layer: LayerInfo) -> int:
    """The vocabulary pair's modules in the layer (the embedding, the head, or both)."""
    return len(layer.tp_vocab.split("+")) if layer.tp_vocab else 0


def tp_dispatch_s(layer: LayerInfo, tp: int, device: Device) -> tuple[float, float]:
    """(forward, backward) host seconds one TP rank of degree ``tp`` on ``device`` spends in
    DTensor's dispatch for ``layer`` per micro-batch: 0 on a GPU, unsplit or alone."""
    if tp <= 1 or not device.type.is_cpu or tp_share(layer, tp) >= 1:
        return 0.0, 0.0
    modules = layer.tp_linears + vocab_modules(layer)
    fwd, bwd = DTENSOR_TP_MODULE_S
    return modules * fwd / device.speed, modules * bwd / device.speed


def tp_step_host_s(layers: Sequence[LayerInfo], tp: int, device: Device) -> float:
    """Host seconds one TP rank's optimizer step on a CPU spends dispatching its DTensor
    parameters: a weight and a bias per split Linear, a weight per vocabulary module."""
    if tp <= 1 or not device.type.is_cpu:
        return 0.0
    split = [x for x in layers if tp_share(x, tp) < 1]
    tensors = sum(2 * x.tp_linears + vocab_modules(x) for x in split)
    return DTENSOR_STEP_S_PER_TENSOR * tensors / device.speed


def fsdp_step_host_s(layers: Sequence[LayerInfo], on_cpu: bool) -> float:
    """Host seconds one FSDP2 rank's optimizer step on a CPU spends dispatching its DTensor
    parameters: :data:`DTENSOR_STEP_S_PER_TENSOR` per tensor of ``layers`` (0 on a GPU)."""
    if not on_cpu:
        return 0.0
    return DTENSOR_STEP_S_PER_TENSOR * sum(len(layer_tensors(x)) for x in layers)
