"""What one tensor-parallel rank computes: the screening's and the simulator's one formula.

A layer tensor parallelism splits (``cost.tp.tp_share`` < 1) runs ``1/tp`` of its work on each
rank in as many kernels, each ``1/tp`` as large. Priced as the same layer at ``1/tp`` of the
micro-batch, the compute model therefore charges what smaller matrices really cost: on a
calibrated device the kernels move down the rate curve (``cost.calibration``), every kernel
keeps its launch overhead, and a measured profile keeps its fixed cost per call (``a`` of
``a + k b``). Perfect ``1/tp`` scaling is the limit of large kernels. A replicated layer runs
whole on every rank. Where the profile store holds per-rank costs measured at this TP degree
(``hetplan import-profile`` rows with ``tp``), they are used as they are.

On a CPU rank each split layer also pays DTensor's dispatch of its split modules
(:func:`hetplan.cost.dtensor.tp_dispatch_s`); measured per-rank costs already hold it.

Approximation: pricing at ``batch / tp`` leaves the layer's weight traffic whole in the
memory term, where each rank reads ``1/tp`` of the weights; it only matters where that term
binds (tiny micro-batches).
"""

from __future__ import annotations

import dataclasses
from typing import cast

from hetplan.cluster.spec import Device
from hetplan.cost.dtensor import tp_dispatch_s
from hetplan.cost.tp import tp_share
from hetplan.cost.types import ComputeModel, LayerCost
from hetplan.graph.types import LayerInfo, ModelGraph


def tp_rank_costs(
    compute: ComputeModel, graph: ModelGraph, device: Device, batch: int, tp: int
) -> list[LayerCost]:
    """Per layer, one rank's forward and backward seconds for a micro-batch of ``batch``
    samples in a TP group of degree ``tp`` (communication not included: ``cost.tp``)."""
    whole = compute.layer_costs(graph, device, batch)
    if tp <= 1:
        return whole
    measured = getattr(compute, "tp_layer_costs", None)  # MeasuredCompute's, if any
    if callable(measured):
        hit = cast("list[LayerCost] | None", measured(graph, device, batch, tp))
        if hit is not None:
            return hit
    split = compute.layer_costs(graph, device, batch / tp)
    return [
        _with_dispatch(s, layer, tp, device) if tp_share(layer, tp) < 1 else w
        for layer, w, s in zip(graph.layers, whole, split, strict=True)
    ]


def _with_dispatch(cost: LayerCost, layer: LayerInfo, tp: int, device: Device) -> LayerCost:
    """A split layer's share plus what DTensor's dispatch costs a CPU rank for it."""
    fwd, bwd = tp_dispatch_s(layer, tp, device)
    if fwd == 0 and bwd == 0:
        return cost
    return dataclasses.replace(cost, fwd_s=cost.fwd_s + fwd, bwd_s=cost.bwd_s + bwd)
