"""Per-device layer cost arrays for the search, computed once per (device kind, batch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from hetplan.cluster.spec import Cluster, DeviceType, Link
from hetplan.cost.comm import p2p_time
from hetplan.cost.memory import LayerBytes, layer_bytes, optimizer_step_s, workspace_bound
from hetplan.cost.threads import compute_kind
from hetplan.cost.tp import tp_comm_times, tp_share
from hetplan.cost.tp_compute import tp_rank_costs
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
    _cache: dict[tuple[object, ...], tuple[Floats, Floats]] = field(default_factory=dict)
    _mem: dict[tuple[str, int], LayerBytes] = field(default_factory=dict)
    _shares: dict[int, Floats] = field(default_factory=dict)
    _shapes: dict[str, int] | None = None
    _kinds: dict[str, tuple[tuple[object, ...], str]] = field(default_factory=dict)
    _steps: dict[tuple[str, int], float] = field(default_factory=dict)
    _opt: dict[tuple[object, ...], float] = field(default_factory=dict)
    _workspace: dict[tuple[int, int], float] = field(default_factory=dict)

    def layers(self, device_id: str, batch: int) -> tuple[Floats, Floats]:
        """Forward and backward seconds of every layer on ``device_id`` (a device or a TP
        group, see ``plan.tp``) for ``batch`` samples."""
        if SEP in device_id:
            return self._group_layers(device_id, batch)
        dev = self.cluster.device(device_id)
        key = (*compute_kind(dev), batch)
        hit = self._cache.get(key)
        if hit is None:
            costs = self.compute.layer_costs(self.graph, dev, batch)
            hit = (
                np.array([c.fwd_s for c in costs], dtype=np.float64),
                np.array([c.bwd_s for c in costs], dtype=np.float64),
            )
            self._cache[key] = hit
        return hit

    def _rank_layers(self, device_id: str, batch: int, tp: int) -> tuple[Floats, Floats]:
        """What one rank of a TP group of degree ``tp`` computes per layer
        (``cost.tp_compute.tp_rank_costs``, as ``predict`` prices it)."""
        dev = self.cluster.device(device_id)
        key = ("tp", tp, *compute_kind(dev), batch)
        hit = self._cache.get(key)
        if hit is None:
            costs = tp_rank_costs(self.compute, self.graph, dev, batch, tp)
            hit = (
                np.array([c.fwd_s for c in costs], dtype=np.float64),
                np.array([c.bwd_s for c in costs], dtype=np.float64),
            )
            self._cache[key] = hit
        return hit

    def _group_layers(self, group: str, batch: int) -> tuple[Floats, Floats]:
        """A TP group: each member computes its share of every layer (the layers tensor
        parallelism splits at ``1/tp`` of the micro-batch, so on the compute model's curve;
        the replicated ones whole; ``cost.tp_compute``), the slowest member bounds it, plus
        each split layer's all-reduces (``cost.tp.tp_comm_time``, as ``predict`` prices
        them)."""
        key = (group, -1.0, batch)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ids = members(group)
        tp = len(ids)
        fwd = np.max([self._rank_layers(d, batch, tp)[0] for d in ids], axis=0)
        bwd = np.max([self._rank_layers(d, batch, tp)[1] for d in ids], axis=0)
        fwd_comm, bwd_comm = tp_comm_times(
            self.graph.layers, batch, self.graph.dtype, ids, self.cluster
        )
        fwd += np.asarray(fwd_comm)
        bwd += np.asarray(bwd_comm)
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
            kind = (*compute_kind(dev), len(ids), self._shapes[dev.node])
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

    def cut_s(self, a: str, b: str, last: int, batch: int) -> float:
        """One direction of the values after layer ``last`` for ``batch`` samples from slot
        ``a`` to slot ``b``, as ``predict`` prices a cut (``cost.comm.p2p_time``)."""
        cuts = self.graph.cut_bytes
        nbytes = float(cuts[last] * batch) if last < len(cuts) else 0.0
        return p2p_time(nbytes, self.link(a, b))

    def optimizer_s(self, slot: str, start: int, end: int, optimizer: str) -> float:
        """The optimizer step of layers ``start:end`` on ``slot`` (each member of a TP group
        its share; the slowest counts), as ``predict`` prices it
        (``cost.memory.optimizer_step_s``)."""
        ids = members(slot)
        out = 0.0
        for d in ids:
            dev = self.cluster.device(d)
            key = (*compute_kind(dev), start, end, len(ids), optimizer)
            hit = self._opt.get(key)
            if hit is None:
                layers = self.graph.layers[start:end]
                hit = optimizer_step_s(self.compute, self.graph, dev, layers, optimizer, len(ids))
                self._opt[key] = hit
            out = max(out, hit)
        return out

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
        """Predict's stage-level backward workspace (``cost.memory.backward_workspace``) for
        one micro-batch of ``batch`` samples, bounded here by the model's largest layer output
        (the screening does not know the stage yet). Cached: the screening asks it for every
        candidate, and each answer reads every layer."""
        hit = self._workspace.get((batch, tp))
        if hit is None:
            hit = workspace_bound(self.graph.layers, batch, tp, self.graph.dtype)
            self._workspace[(batch, tp)] = hit
        return hit

    def layer_mem(
        self,
        batch: int,
        in_flight: int,
        optimizer: str,
        stashed: int = 0,
        synced: bool = False,
        tp: int = 1,
    ) -> Floats:
        """Bytes per layer as ``cost.memory.stage_memory`` counts them (its per-layer model,
        ``cost.memory.layer_bytes``), without the stage-level terms (framework allowance,
        kept stage inputs, workspace): weights, gradients, optimizer state, ``stashed``
        weight versions and, per each of ``in_flight`` micro-batches of ``batch`` samples,
        its activations and autocast's weight copies (with recomputation the caller passes
        the one micro-batch kept whole); ``synced``: plus DDP's flat gradient buckets, a
        second copy of the gradients; ``tp``: per member of a TP group."""
        key = (optimizer, tp)
        per = self._mem.get(key)
        if per is None:
            dtype = self.graph.dtype
            per = self._mem[key] = layer_bytes(
                self.graph.layers, optimizer=optimizer, dtype=dtype, tp=tp
            )
        parts = per.parts(
            micro_batch=batch, kept=in_flight, copies=in_flight, stashed_versions=stashed
        )
        total: Floats = sum(parts.values(), np.zeros(len(self.graph.layers)))
        return total + per.grads if synced else total
