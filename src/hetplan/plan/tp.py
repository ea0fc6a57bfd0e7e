"""Tensor-parallel groups as search slots.

Inside the search a tensor-parallel group of ``tp`` devices (same type, same node, Megatron
style) stands in for one device: its id is the members' ids joined by ``+``. The plan built
from a candidate lists the members in ``StagePlan.devices`` and sets ``Plan.tp``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cluster.spec import Cluster
from hetplan.cost.tp import tp_splits
from hetplan.graph.types import ModelGraph

SEP = "+"
TP_DEGREES = (2, 4, 8)
"""Tensor-parallel degrees tried (inside a node: TP's per-block allreduces need fast links;
Megatron-LM keeps TP within a DGX node, Narayanan et al. 2021)."""


def members(slot: str) -> list[str]:
    """The device ids of a slot (one device, or a TP group)."""
    return slot.split(SEP)


def untraced_notes(graph: ModelGraph) -> list[str]:
    """Why no TP plan is offered: a layer holds a block torch.fx could not trace."""
    if not (untraced := graph.untraced()):
        return []
    return [
        f"no tensor-parallel plan offered: torch.fx could not trace a module in {untraced}, so "
        "the attention and MLP units there are unknown (`hetplan inspect` names each)"
    ]


def has_tp_units(graph: ModelGraph) -> bool:
    """The graph has at least one layer with Megatron-style units (``LayerInfo.tp_units``,
    found from structure by :mod:`hetplan.graph.tp_units`): tensor parallelism has blocks to
    split. A vocabulary pair alone (an embedding without blocks) is not enough."""
    if any(layer.tp_error for layer in graph.layers):
        return False  # a block fx could not trace: its units are unknown (graph.notes says)
    return any(layer.tp_units > 0 for layer in graph.layers)


def splits_at(graph: ModelGraph, tp: int) -> bool:
    """Some layer with units splits at degree ``tp`` (``tp`` divides its heads and widths)."""
    return any(layer.tp_units > 0 and tp_splits(layer, tp) for layer in graph.layers)


def tp_groups(cluster: Cluster, devices: Sequence[str], tp: int) -> list[str] | None:
    """Consecutive groups of ``tp`` devices of one type on one node, or None when a
    (type, node) pool of the subset does not divide by ``tp``."""
    pools: dict[tuple[str, str], list[str]] = {}
    for d in devices:
        dev = cluster.device(d)
        pools.setdefault((dev.type.name, dev.node), []).append(d)
    out = []
    for ids in pools.values():
        if len(ids) % tp:
            return None
        out += [SEP.join(ids[i : i + tp]) for i in range(0, len(ids), tp)]
    return out
