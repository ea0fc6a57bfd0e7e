"""Weights tied across pipeline stages (GPT's embedding and output head): copy and sync.

The runtime (:class:`hetplan.run.execute.gradsync.TieSync`) keeps a tied weight on every stage that
uses it; the stage holding the owning layer (the first to use it) owns it. Each later stage
sends its partial gradient to the owner after its last backward (downstream stages finish
first: hidden behind the owner's remaining backward) and waits, at the optimizer step, for
the owner to send back the synchronised gradient (fp32 under mixed precision), then steps its
own copy. So a non-owning stage holds the copy's weights, gradient and optimizer state
(:func:`stage_tied_params`, priced by ``cost.memory.stage_memory``), and its optimizer step
starts one transfer of that gradient later (:func:`tie_sync_s`). Megatron-LM keeps tied
embeddings in step the same way (an all-reduce over its "embedding group").
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cluster.spec import Cluster
from hetplan.cost.memory import grad_scale
from hetplan.cost.tp import tp_share
from hetplan.graph.types import ModelGraph
from hetplan.planspec.dtypes import DTYPE_BYTES


def stage_ties(
    graph: ModelGraph, ranges: Sequence[tuple[int, int]], s: int, tp: int = 1
) -> list[tuple[int, float]]:
    """(owning stage, parameters per TP rank) of every weight stage ``s`` uses but another
    stage owns (a vocabulary-split head holds ``1/tp`` of the tied embedding)."""
    lo, hi = ranges[s]
    out = []
    for layer in graph.layers[lo : hi + 1]:
        owner = layer.shared_owner
        if layer.shared_params and 0 <= owner < lo:
            stage = next(i for i, (a, b) in enumerate(ranges) if a <= owner <= b)
            out.append((stage, layer.shared_params * tp_share(layer, tp)))
    return out


def stage_tied_params(
    graph: ModelGraph, ranges: Sequence[tuple[int, int]], s: int, tp: int = 1
) -> float:
    """Parameters (per TP rank) of the tied-weight copies stage ``s`` holds."""
    return sum(params for _, params in stage_ties(graph, ranges, s, tp))


def tie_grad_bytes(graph: ModelGraph, params: float) -> float:
    """Bytes of a tied weight's gradient as the owner sends it (fp32 under mixed precision)."""
    return params * DTYPE_BYTES[graph.dtype] * grad_scale(graph.dtype)


def tie_sync_s(
    graph: ModelGraph,
    cluster: Cluster,
    ranges: Sequence[tuple[int, int]],
    stage_devices: Sequence[Sequence[str]],
    s: int,
    tp: int = 1,
) -> float:
    """Seconds stage ``s`` waits at its optimizer step for the synchronised gradients of the
    weights it shares with earlier stages (0 when it owns all it uses)."""
    total = 0.0
    for owner, params in stage_ties(graph, ranges, s, tp):
        link = cluster.link(stage_devices[owner][0], stage_devices[s][0])
        total += link.transfer_s(tie_grad_bytes(graph, params))
    return total
