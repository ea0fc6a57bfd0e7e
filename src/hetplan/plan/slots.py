"""Slot costs for the partitioner, vectorised, and the cached partition of a slot order."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from hetplan.cost.memory import (
    batches_held,
    framework_overhead_bytes,
    is_gpu,
)
from hetplan.cost.ties import tie_sync_s
from hetplan.plan.closed_form import StageCosts
from hetplan.plan.context import Context, SlotKey
from hetplan.plan.partition import Partition, partition_fast
from hetplan.plan.tp import members
from hetplan.planspec.strategies import spec_of

Floats = NDArray[np.float64]


def distinct_replicas(ctx: Context, key: SlotKey) -> list[int]:
    """One replica index per distinct replica of ``key``: same micro-batch size and, slot by
    slot, the same pricing signature (device kind, node shape, which slots share a node).
    Replicas alike in all that have the same times, cuts and memory, so the slot costs below
    look at one of each (a hybrid of 128 replicas of a symmetric cluster prices a few)."""
    order, micro = key
    seen: dict[object, int] = {}
    for v, devs in enumerate(order):
        nodes: dict[str, int] = {}
        sig = tuple(ctx.pricing.signature(d, nodes) for d in devs)
        seen.setdefault((micro[v], sig), v)
    return list(seen.values())


def slot_times(ctx: Context, key: SlotKey) -> Floats:
    """(S, L) forward + backward seconds per layer on each slot, at the slowest replica."""
    order, micro = key
    times = np.zeros((len(order[0]), len(ctx.graph.layers)))
    for v in distinct_replicas(ctx, key):
        devs = order[v]
        for s, d in enumerate(devs):
            fwd, bwd = ctx.pricing.layers(d, micro[v])
            np.maximum(times[s], fwd + bwd, out=times[s])
    return times


def stage_costs(
    ctx: Context,
    replicas: Sequence[tuple[Sequence[str], int]],
    ranges: Sequence[tuple[int, int]],
) -> StageCosts:
    """The closed forms' inputs (``plan.closed_form``) for stages ``ranges`` (half-open layer
    ranges) placed, per replica, on the given slots with that replica's micro-batch size: the
    slowest replica's forward, backward, cut and optimizer step per stage."""
    n = len(ranges)
    fwd, bwd, cut, opt = [0.0] * n, [0.0] * n, [0.0] * max(n - 1, 0), [0.0] * n
    closed = [(i, j - 1) for i, j in ranges]
    for slots, micro in replicas:
        devs = [members(slot) for slot in slots]
        for k, ((i, j), slot) in enumerate(zip(ranges, slots, strict=True)):
            f, b = ctx.pricing.layers(slot, micro)
            fwd[k] = max(fwd[k], float(f[i:j].sum()))
            bwd[k] = max(bwd[k], float(b[i:j].sum()))
            # The optimizer step, after the tied weights' gradients arrive (cost.ties).
            tie = tie_sync_s(ctx.graph, ctx.pricing.cluster, closed, devs, k, len(devs[k]))
            opt[k] = max(opt[k], ctx.pricing.optimizer_s(slot, i, j, ctx.optimizer) + tie)
            if k + 1 < n:
                cut[k] = max(cut[k], ctx.pricing.cut_s(slot, slots[k + 1], j - 1, micro))
    cluster = ctx.pricing.cluster
    on_cores = [
        all(cluster.device(d).type.is_cpu for slots, _ in replicas for d in members(slots[k]))
        for k in range(n)
    ]
    held = tuple(
        (cut[k - 1] if k > 0 else 0.0) + (cut[k] if k + 1 < n else 0.0) if on_cores[k] else 0.0
        for k in range(n)
    )
    return StageCosts(
        fwd=tuple(fwd), bwd=tuple(bwd), cut=tuple(cut), opt=tuple(opt),
        held=held if any(held) else (),
    )  # fmt: skip


def partition_costs(ctx: Context, key: SlotKey, part: Partition) -> StageCosts:
    """:func:`stage_costs` of ``part`` over the distinct replicas of ``key``."""
    order, micro = key
    replicas = [([order[v][s] for s in part.slots], micro[v]) for v in distinct_replicas(ctx, key)]
    return stage_costs(ctx, replicas, part.stages)


def slot_cuts(ctx: Context, key: SlotKey) -> Floats:
    """(S, S, L-1) seconds to send cut ``c`` from slot ``s`` to slot ``t`` (one direction,
    alpha-beta over the link between the two slots' devices), the slowest replica's."""
    order, micro = key
    n = len(order[0])
    cut = np.asarray(ctx.graph.cut_bytes, dtype=np.float64)
    out = np.zeros((n, n, cut.shape[0]))
    for v in distinct_replicas(ctx, key):
        devs = order[v]
        inv_bw = np.zeros((n, n))
        lat = np.zeros((n, n))
        for s in range(n):
            for t in range(s + 1, n):
                link = ctx.pricing.link(devs[s], devs[t])
                inv_bw[s, t] = 1.0 / link.bandwidth
                lat[s, t] = link.latency_s
        sizes = cut * micro[v]
        times = lat[:, :, None] + sizes[None, None, :] * inv_bw[:, :, None]
        times = np.where(sizes[None, None, :] > 0, times, 0.0)
        np.maximum(out, times, out=out)
    return out


def slot_memory(
    ctx: Context, key: SlotKey, strategy: str, m: int, *, recompute: bool = False
) -> tuple[Floats, Floats, Floats]:
    """(S, L) bytes per layer on each slot under ``strategy`` with ``m`` micro-batches (with
    gradient buckets when replicas synchronise), (S,) fixed bytes (framework allowance, kept
    stage inputs under recomputation) and (S,) capacities.

    The in-flight count and stashed versions use the slot index as the stage index; with
    skipped slots that under-counts, and the predictor's exact memory check catches it.
    """
    order, micro = key
    n = len(order[0])
    spec = spec_of(strategy)
    mem = np.zeros((n, len(ctx.graph.layers)))
    fixed = np.zeros(n)
    caps = np.full(n, math.inf)
    biggest_input = max([ctx.graph.input_bytes, *ctx.graph.cut_bytes])
    for v in distinct_replicas(ctx, key):
        devs = order[v]
        for s, d in enumerate(devs):
            flight = spec.in_flight(s, n, m)
            stashed = spec.stashed_versions(s, n, m)
            # Recomputation keeps one micro-batch's activations plus each in-flight stage
            # input (bounded here by the largest cut).
            kept = 1 if recompute else flight
            layer = ctx.pricing.layer_mem(
                micro[v], kept, ctx.optimizer, stashed, synced=len(order) > 1, tp=len(members(d))
            )
            np.maximum(mem[s], layer, out=mem[s])
            dtype = ctx.pricing.device_type(d)
            # Stage inputs held for the backward (predict's stage_inputs; with recomputation
            # the kept inputs), bounded by the largest cut, plus the backward workspace.
            inputs = biggest_input * micro[v] * flight if recompute or s > 0 else 0.0
            extra = inputs + ctx.pricing.workspace(micro[v], len(members(d)))
            if s in (0, n - 1):  # they read the pipeline's batch (predict's input_batch)
                held = batches_held(continuous=spec.continuous, in_flight=flight, micro_batches=m)
                extra += ctx.graph.input_bytes * micro[v] * m * held
            fixed[s] = max(fixed[s], framework_overhead_bytes(is_gpu(dtype)) + extra)
            caps[s] = min(caps[s], dtype.memory_bytes)
    return mem, fixed, caps


def partition_for(
    ctx: Context, key: SlotKey, strategy: str, m: int, *, recompute: bool = False
) -> Partition:
    """Min-max partition of the layers over the slots of ``key`` (see ``partition_core``).

    The split without memory limits is cached per key; it is re-solved under the limits only
    when it does not fit under ``strategy`` with ``m`` micro-batches. Raises
    PartitionInfeasible when nothing fits.
    """
    part = ctx.partitions.get(key)
    times: Floats | None = None
    cuts: Floats | None = None
    if part is None:
        times, cuts = slot_times(ctx, key), slot_cuts(ctx, key)
        part = partition_fast(times, cuts, comm="overlap")
        ctx.partitions[key] = part
    mem, fixed, caps = slot_memory(ctx, key, strategy, m, recompute=recompute)
    if all(
        fixed[s] + float(mem[s, i:j].sum()) <= caps[s]
        for (i, j), s in zip(part.stages, part.slots, strict=True)
    ):
        return part
    if times is None or cuts is None:
        times, cuts = slot_times(ctx, key), slot_cuts(ctx, key)
    return partition_fast(times, cuts, layer_mem=mem, fixed_mem=fixed, mem_cap=caps, comm="overlap")
