"""Per-layer compute cost, the common currency of analytical and measured models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hetplan.cluster.spec import Device
from hetplan.graph.types import ModelGraph


@dataclass(frozen=True, kw_only=True)
class LayerCost:
    """Forward and backward time of one layer on one device for one (micro-)batch."""

    fwd_s: float
    bwd_s: float
    source: str
    """``analytical``, ``measured on <device type>`` or ``scaled from <device type>``."""


class ComputeModel(Protocol):
    """Anything that prices a model's layers on a device: analytical or measured."""

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        """Cost of every layer of ``graph`` on ``device`` for a micro-batch of ``batch``
        samples (fractional for a tensor-parallel rank's share: ``cost.tp_compute``)."""
        ...
