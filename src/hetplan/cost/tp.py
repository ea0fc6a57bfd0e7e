"""Tensor parallelism inside a stage: what it splits and what it communicates, per layer.

The one model of TP that the planner's screening (:mod:`hetplan.plan.pricing`) and the
simulator's input (:mod:`hetplan.predict.price`, :mod:`hetplan.cost.memory`) share. It prices
the layout :mod:`hetplan.run.setup.tensor_parallel` executes, from the structural facts the graph
extractor records per layer (``LayerInfo.tp_*``, found by :mod:`hetplan.graph.tp_units`):

* a **unit** (an attention: q/k/v split by output features, the output projection by input
  features; an MLP: up/gate by output features, down by input features) all-reduces its output
  once forward (Megatron's operator g) and its input gradient backward once per Linear split
  by output features, each ``b x s x h`` elements: Megatron's f is one all-reduce (Shoeybi et
  al. 2019, "Megatron-LM", Sec. 3 / Fig. 4: a block, attention + MLP, does 2 + 2), but
  ``ColwiseParallel`` turns each projection's input into a replicated DTensor of its own, whose
  gradient is reduced on its own: a gpt-tiny block split by hetplan's runtime does 2 forward
  and 4 backward all-reduces (q, k, v, up; ``CommDebugMode``, torch 2.13 / gloo, tp = 2,
  2026-11-29);
* the **vocabulary-split embedding** all-reduces its output once forward (the rows a rank does
  not hold look up zeros); no backward communication;
* the **vocabulary-split head** leaves the logits sharded and the loss runs under torch's
  ``loss_parallel``: 3 small forward all-reduces of one fp32 value per token (max, sum of
  exponentials, target logit) and 1 backward all-reduce of the head's input gradient
  (``b x s x h``); the logits are never gathered;
* every other layer (norms outside blocks, pooling, an ``nn.MultiheadAttention``) is
  **replicated**: every rank computes it whole, without communication.

Measured with torch's ``CommDebugMode`` on torch 2.13 / gloo, gpt-tiny, tp = 2, one
micro-batch of 4 x 64 tokens (hetplan's TP research notes, question Q4): no all-gathers or
reduce-scatters; the forward all-reduces of a block are in the compute dtype, its backward
ones fp32 even under bf16 autocast (the gradient has the dtype of the split projections'
input, a LayerNorm output, which autocast keeps fp32); the embedding's and the loss's are fp32.

A layer splits at degree ``tp`` when it has units or a vocabulary part and ``tp`` divides
``LayerInfo.tp_split`` (whole heads per rank, whole vocabulary rows): its compute, parameters,
gradients, optimizer state and saved activations are divided by ``tp`` (:func:`tp_share`);
a replicated layer's are not. The per-layer share is a simplification: a split block's
LayerNorms, output biases and residual activations are in fact held whole on every rank
(Megatron without sequence parallelism), a few percent of a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.cost.comm_collectives import allreduce_time
from hetplan.graph.types import LayerInfo
from hetplan.planspec.dtypes import DTYPE_BYTES, FP32_BYTES

UNIT_FWD_ALLREDUCES = 1  # all-reduces per unit per forward: its output (Megatron g; Q4)
UNIT_BWD_ALLREDUCES = 1  # per unit per backward where its colwise Linears are not counted (a
# graph traced before ``LayerInfo.tp_linears``): its input gradient (Megatron f; Q4)
EMBEDDING_FWD_ALLREDUCES = 1  # all-reduces of the vocabulary-split embedding's output (Q4)
EMBEDDING_BWD_ALLREDUCES = 0  # its weight gradient is a local slice: no comm (Q4)
LOSS_PARALLEL_ALLREDUCES = 3  # forward all-reduces of loss_parallel: max, sum-exp, target (Q4)
LOSS_PARALLEL_BYTES_PER_TOKEN = FP32_BYTES  # bytes: one fp32 value per token each (Q4: (b*s, 1))
HEAD_BWD_ALLREDUCES = 1  # all-reduces of the vocabulary-split head's input gradient (Q4)
# Bytes per element of the embedding's output and of every backward all-reduce: FP32_BYTES
# (planspec.dtypes), in fp32 training and under autocast alike (bf16/fp16 train over fp32
# weights; Q4).


@dataclass(frozen=True, kw_only=True)
class TpTraffic:
    """The all-reduces one TP rank runs for a layer and one micro-batch, bytes each."""

    fwd: tuple[float, ...] = ()
    bwd: tuple[float, ...] = ()


def tp_splits(layer: LayerInfo, tp: int) -> bool:
    """The layer is split at degree ``tp``: it has units or a vocabulary part and ``tp``
    divides ``layer.tp_split``. False for tp = 1."""
    return tp > 1 and layer.tp_split > 0 and layer.tp_split % tp == 0


def tp_share(layer: LayerInfo, tp: int) -> float:
    """Share of the layer's compute, parameters, gradients, optimizer state and saved
    activations one TP rank holds: ``1 / tp`` split, 1 replicated."""
    return 1.0 / tp if tp_splits(layer, tp) else 1.0


def tp_output_share(layer: LayerInfo, tp: int) -> float:
    """Share of the layer's output one TP rank holds: ``1 / tp`` for a split vocabulary head
    (the logits stay sharded), 1 otherwise (a unit's output is all-reduced: whole on every
    rank)."""
    return 1.0 / tp if tp_splits(layer, tp) and "head" in layer.tp_vocab else 1.0


def tp_traffic(layer: LayerInfo, micro_batch: int, dtype: str, tp: int) -> TpTraffic:
    """All-reduce sizes of ``layer`` for one micro-batch of ``micro_batch`` samples at degree
    ``tp`` in training dtype ``dtype`` (see the module docstring); nothing when it does not
    split. ``b x s x h`` = ``micro_batch x layer.tp_tokens x layer.tp_hidden`` elements."""
    if not tp_splits(layer, tp):
        return TpTraffic()
    elems = float(micro_batch * layer.tp_tokens * layer.tp_hidden)
    low = float(DTYPE_BYTES[dtype])  # the compute dtype: the units' outputs
    fwd = [elems * low] * (UNIT_FWD_ALLREDUCES * layer.tp_units)
    bwd = [elems * FP32_BYTES] * unit_bwd_allreduces(layer)
    if "embedding" in layer.tp_vocab:
        fwd += [elems * FP32_BYTES] * EMBEDDING_FWD_ALLREDUCES
        bwd += [elems * FP32_BYTES] * EMBEDDING_BWD_ALLREDUCES
    if "head" in layer.tp_vocab:
        tokens = float(micro_batch * layer.tp_tokens)
        fwd += [tokens * LOSS_PARALLEL_BYTES_PER_TOKEN] * LOSS_PARALLEL_ALLREDUCES
        bwd += [elems * FP32_BYTES] * HEAD_BWD_ALLREDUCES
    return TpTraffic(fwd=tuple(fwd), bwd=tuple(bwd))


def unit_bwd_allreduces(layer: LayerInfo) -> int:
    """Backward all-reduces of the layer's units: one per Linear split by output features (one
    rowwise Linear per unit; module doc)."""
    if layer.tp_linears > 0:
        return layer.tp_linears - layer.tp_units
    return UNIT_BWD_ALLREDUCES * layer.tp_units


def tp_comm_time(
    layer: LayerInfo,
    micro_batch: int,
    dtype: str,
    devices: Sequence[str],
    cluster: Cluster,
) -> tuple[float, float]:
    """(forward s, backward s) of ``layer``'s TP all-reduces for one micro-batch over the TP
    group ``devices`` (:func:`tp_traffic`, each priced by ``allreduce_time``); (0, 0) for a
    replicated layer or a group of one."""
    traffic = tp_traffic(layer, micro_batch, dtype, len(devices))
    # A block's all-reduces repeat one size (2 x units): each size is priced once, and the
    # sums add the same terms in the same order.
    times = {b: allreduce_time(b, devices, cluster) for b in (*traffic.fwd, *traffic.bwd)}
    fwd = sum(times[b] for b in traffic.fwd)
    bwd = sum(times[b] for b in traffic.bwd)
    return fwd, bwd


def tp_comm_times(
    layers: Sequence[LayerInfo],
    micro_batch: int,
    dtype: str,
    devices: Sequence[str],
    cluster: Cluster,
) -> tuple[list[float], list[float]]:
    """Per layer of ``layers``, (forward s, backward s) of :func:`tp_comm_time`: what the
    screening (``plan.pricing``) and the prediction (``predict.price``) both add to a TP
    group's layer times. Identical blocks are priced once (:func:`tp_layer_key`)."""
    keys, firsts = _layer_keys(layers)
    memo = {
        key: tp_comm_time(layer, micro_batch, dtype, devices, cluster)
        for key, layer in firsts.items()
    }
    return [memo[key][0] for key in keys], [memo[key][1] for key in keys]


LayerKey = tuple[int, int, str, int, int, int]


def tp_layer_key(layer: LayerInfo) -> LayerKey:
    """What :func:`tp_comm_time` reads of a layer (identical blocks price once)."""
    return (
        layer.tp_units, layer.tp_linears, layer.tp_vocab, layer.tp_split, layer.tp_tokens,
        layer.tp_hidden,
    )  # fmt: skip


_last_keys: list[tuple[Sequence[LayerInfo], list[LayerKey], dict[LayerKey, LayerInfo]]] = []


def _layer_keys(
    layers: Sequence[LayerInfo],
) -> tuple[list[LayerKey], dict[LayerKey, LayerInfo]]:
    """Each layer's :func:`tp_layer_key`, and the first layer of each key. The screening asks
    for the whole model's layers thousands of times (once per TP group and batch): the last
    tuple's answer is kept (a tuple does not change; it is held, so it is the same one)."""
    if _last_keys and _last_keys[0][0] is layers:
        return _last_keys[0][1], _last_keys[0][2]
    keys = [tp_layer_key(layer) for layer in layers]
    firsts: dict[LayerKey, LayerInfo] = {}
    for key, layer in zip(keys, layers, strict=True):
        firsts.setdefault(key, layer)
    if isinstance(layers, tuple):
        _last_keys[:] = [(layers, keys, firsts)]
    return keys, firsts
