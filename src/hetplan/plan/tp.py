"""Tensor-parallel groups as search slots.

Inside the search a tensor-parallel group of ``tp`` devices (same type, same node, Megatron
style) stands in for one device: its id is the members' ids joined by ``+``. The plan built
from a candidate lists the members in ``StagePlan.devices`` and sets ``Plan.tp``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hetplan.cluster.spec import Cluster
from hetplan.graph.types import ModelGraph

SEP = "+"
TP_DEGREES = (2, 4, 8)
"""Tensor-parallel degrees tried (inside a node: TP's per-block allreduces need fast links;
Megatron-LM keeps TP within a DGX node, Narayanan et al. 2021)."""
_BLOCK = re.compile(r"^(block|layer)\d+$")


def members(slot: str) -> list[str]:
    """The device ids of a slot (one device, or a TP group)."""
    return slot.split(SEP)


def is_transformer(graph: ModelGraph) -> bool:
    """Layers named ``block<i>`` / ``layer<i>``: the zoo's transformer blocks, which the cost
    model splits Megatron-style."""
    return sum(1 for layer in graph.layers if _BLOCK.match(layer.name)) >= 2


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
