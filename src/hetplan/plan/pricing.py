"""Per-device layer cost arrays for the search, computed once per (device kind, batch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from hetplan.cluster.spec import Cluster, DeviceType, Link
from hetplan.cost.memory import (
    BACKWARD_GRAD_BUFFERS,
    OPTIMIZER_SLOTS,
    OPTIMIZER_STATE_BYTES,
    cast_cache_bytes,
    grad_scale,
    weight_scale,
)
from hetplan.cost.tp import tp_comm_time, tp_layer_key, tp_output_share, tp_share
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import ModelGraph
from hetplan.plan.classes import symmetry
from hetplan.plan.tp import SEP, members

Floats = NDArray[np.float64]


@dataclass
class Pricing:
    """Caches ``compute.layer_costs`` as numpy arrays; devices of one type and speed share."""

    graph: ModelGraph
    cluster: Cluster
    compute: ComputeModel
    _cache: dict[tuple[str, float, int], tuple[Floats, Floats]] = field(default_factory=dict)
    _mem_base: tuple[Floats, Floats, Floats, Floats, Floats] | None = None
    _shares: dict[int, Floats] = field(default_factory=dict)
    _shapes: dict[str, int] | None = None
    _kinds: dict[str, tuple[tuple[object, ...], str]] = field(default_factory=dict)
    _steps: dict[tuple[str, int], float] = field(default_factory=dict)

    def layers(self, device_id: str, batch: int) -> tuple[Floats, Floats]:
        """Forward and backward seconds of every layer on ``device_id`` (a device or a TP
        group, see ``plan.tp``) for ``batch`` samples."""
        if SEP in device_id:
            return self._group_layers(device_id, batch)
        dev = self.cluster.device(device_id)
        key = (dev.type.name, dev.speed, batch)
        hit = self._cache.get(key)
        if hit is None:
            costs = self.compute.layer_costs(self.graph, dev, batch)
            hit = (
                np.array([c.fwd_s for c in costs], dtype=np.float64),
                np.array([c.bwd_s for c in costs], dtype=np.float64),
            )
            self._cache[key] = hit
        return hit

    def _group_layers(self, group: str, batch: int) -> tuple[Floats, Floats]:
        """A TP group: each member computes ``tp_share`` of every layer (``1/tp`` of the
        layers tensor parallelism splits, all of the replicated ones; the slowest member bounds
        it), plus each split layer's all-reduces (``cost.tp.tp_comm_time``, as ``predict``
        prices them)."""
        key = (group, -1.0, batch)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ids = members(group)
        tp = len(ids)
        share = self.tp_shares(tp)
        fwd = np.max([self.layers(d, batch)[0] for d in ids], axis=0) * share
        bwd = np.max([self.layers(d, batch)[1] for d in ids], axis=0) * share
        memo: dict[tuple[int, str, int, int, int], tuple[float, float]] = {}
        for k, layer in enumerate(self.graph.layers):
            if share[k] == 1.0:
                continue
            lk = tp_layer_key(layer)
            if lk not in memo:
                memo[lk] = tp_comm_time(layer, batch, self.graph.dtype, ids, self.cluster)
            fwd[k] += memo[lk][0]
            bwd[k] += memo[lk][1]
        self._cache[key] = (fwd, bwd)
        return fwd, bwd

    def signature(self, slot: str, nodes: dict[str, int]) -> tuple[object, ...]:
        """What prices ``slot`` inside one replica: its members' kind, the shape of their
        node (``plan.classes``) and which earlier slot of the replica shares that node
        (``nodes``: node -> first position, filled as the replica is walked). A cluster with
        per-pair link overrides has no shapes: the slot itself is its signature."""
        if self.cluster.pair_links:
            return (slot,)
        hit = self._kinds.get(slot)
        if hit is None:
            if self._shapes is None:
                sym = symmetry(self.cluster)
                self._shapes = {n: s.index for s in sym.shapes for n in s.nodes}
            ids = members(slot)
            dev = self.cluster.device(ids[0])
            kind = (dev.type.name, dev.speed, len(ids), self._shapes[dev.node])
            hit = self._kinds[slot] = (kind, dev.node)
        return (*hit[0], nodes.setdefault(hit[1], len(nodes)))

    def tp_shares(self, tp: int) -> Floats:
        """Per layer, the share one of ``tp`` TP ranks computes and holds (``cost.tp.tp_share``)."""
        hit = self._shares.get(tp)
        if hit is None:
            layers = self.graph.layers
            hit = np.array([tp_share(layer, tp) for layer in layers], dtype=np.float64)
            self._shares[tp] = hit
        return hit

    def device_type(self, slot: str) -> DeviceType:
        """The device type of a device or of a TP group's members (all alike)."""
        return self.cluster.device(members(slot)[0]).type

    def link(self, a: str, b: str) -> Link:
        """The link between two slots; between TP groups, rank ``t`` of one sends the whole
        (replicated) cut to rank ``t`` of the other, all pairs at once: the first pair's link
        stands for them."""
        return self.cluster.link(members(a)[0], members(b)[0])

    def step_time(self, device_id: str, batch: int) -> float:
        """Forward + backward seconds of the whole model for ``batch`` samples."""
        key = (device_id, batch)
        hit = self._steps.get(key)
        if hit is None:
            fwd, bwd = self.layers(device_id, batch)
            hit = self._steps[key] = float(fwd.sum() + bwd.sum())
        return hit

    def speed(self, device_id: str, batch: int) -> float:
        """Samples per second of the whole model at ``batch`` samples per step."""
        return batch / self.step_time(device_id, batch)

    def workspace(self, batch: int, tp: int = 1) -> float:
        """Predict's stage-level backward workspace (``cost.memory.BACKWARD_GRAD_BUFFERS``
        activation gradients of one micro-batch of ``batch`` samples), bounded here by the
        model's largest layer output (the screening does not know the stage yet); per TP rank,
        a split vocabulary head's logits are ``1/tp`` (``cost.tp.tp_output_share``)."""
        biggest = max(
            (layer.out_bytes * tp_output_share(layer, tp) for layer in self.graph.layers),
            default=0,
        )
        return float(BACKWARD_GRAD_BUFFERS * biggest * batch)

    def layer_mem(
        self,
        batch: int,
        in_flight: int,
        optimizer: str,
        stashed: int = 0,
        synced: bool = False,
        tp: int = 1,
    ) -> Floats:
        """Bytes per layer as ``cost.memory.stage_memory`` counts them, without the per-device
        framework allowance: weights, gradients, optimizer state, stashed weight versions,
        and per each of ``in_flight`` micro-batches of ``batch`` samples, its activations and
        autocast's weight copies (weights, gradients and state in fp32 under mixed precision;
        with recomputation the caller passes the one micro-batch kept whole);
        ``synced``: plus DDP's flat gradient buckets, a second copy of the gradients; ``tp``:
        per member of a TP group (the layers tensor parallelism splits divided by tp, the
        replicated ones whole: ``cost.tp.tp_share``)."""
        if self._mem_base is None:
            dtype = self.graph.dtype
            layers = self.graph.layers
            param_bytes = np.array([layer.param_bytes for layer in layers], dtype=np.float64)
            self._mem_base = (
                param_bytes * weight_scale(dtype),
                param_bytes * grad_scale(dtype),
                np.array([layer.params for layer in layers], dtype=np.float64),
                np.array([cast_cache_bytes(layer, dtype) for layer in layers], dtype=np.float64),
                np.array([layer.saved_bytes for layer in layers], dtype=np.float64),
            )
        weights, grads, params, cast, saved = self._mem_base
        per_param = OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
        held = weights * (1 + stashed) + grads * (1 + int(synced)) + params * per_param
        share = self.tp_shares(tp) if tp > 1 else 1.0
        return (held + cast * in_flight + saved * (batch * in_flight)) * share
