"""Data-parallel screening over groups of identical replicas, in O(groups).

A data-parallel candidate's estimate depends only on how many replicas of each kind it has
(device type, speed, TP degree) and on the shape of its allreduce ring, so the symmetric
search (``plan.classes``) prices a subset of thousands of devices from its class counts; the
concrete ``candidates.dp_candidate`` groups its devices and calls the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetplan.cost.comm import ddp_buckets, overlapped_allreduce_exposed
from hetplan.cost.memory import framework_overhead_bytes, is_gpu, tp_grad_tensor_bytes
from hetplan.plan.context import Context
from hetplan.plan.objective import Metrics
from hetplan.plan.tp import members
from hetplan.planspec.batch import micro_batch_size

Share = tuple[int, int]
"""``(samples, replicas with one more)``: a group's batch shares differ by at most one."""


@dataclass(frozen=True, kw_only=True)
class DpEstimate:
    """The screening figures of a data-parallel candidate."""

    micro_batches: int
    """Gradient accumulation steps (1 = none)."""
    shares: list[Share]
    """Per group."""
    metrics: Metrics


def split_groups(batch: int, weights: Sequence[float], counts: Sequence[int]) -> list[Share]:
    """``planspec.batch.split_batch`` (floor 1, largest remainder) for ``counts[g]`` replicas of
    weight ``weights[g]``: equal weights get equal exact shares and remainders, so a group's
    extra samples go to its first replicas; ties between groups go to the earlier group."""
    n = sum(counts)
    if batch < n:
        raise ValueError(f"batch {batch} cannot give each of the {n} replicas 1 samples")
    total = sum(w * c for w, c in zip(weights, counts, strict=True))
    exact = [(batch - n) * w / total for w in weights]
    out = [[1 + int(x), 0] for x in exact]
    rest = batch - sum((1 + int(x)) * c for x, c in zip(exact, counts, strict=True))
    for g in sorted(range(len(counts)), key=lambda g: -(exact[g] - int(exact[g]))):
        extra = min(rest, counts[g])
        out[g][1] = extra
        rest -= extra
    return [(lo, hi) for lo, hi in out]


def expand(shares: Sequence[Share], counts: Sequence[int]) -> list[list[int]]:
    """Per group, every replica's batch (the extra samples on the first ones)."""
    return [[lo + (i < hi) for i in range(c)] for (lo, hi), c in zip(shares, counts, strict=True)]


def dp_estimate(
    ctx: Context,
    slots: Sequence[str],
    counts: Sequence[int],
    allreduce: Callable[[float], float],
    *,
    equal: bool = False,
) -> DpEstimate | None:
    """Data parallel over ``counts[g]`` replicas like slot ``slots[g]``: the batch split by
    speed (or equally), the fewest accumulation steps that fit (None if none), the slowest
    replica's compute plus the allreduce its backward does not hide (DDP buckets), plus the
    slowest optimizer step."""
    n = sum(counts)
    ref = max(1, ctx.batch // n)
    weights = [1.0] * len(slots) if equal else [ctx.pricing.speed(s, ref) for s in slots]
    shares = split_groups(ctx.batch, weights, counts)
    m = _accumulation(ctx, slots, shares, counts, synced=n > 1)
    if m is None:
        return None
    rows = []
    slowest, slowest_b, worst = slots[0], 0, -1.0
    for slot, (lo, hi), c in zip(slots, shares, counts, strict=True):
        for b, k in ((lo, c - hi), (lo + 1, hi)):
            if k == 0:
                continue
            busy = m * ctx.pricing.step_time(slot, micro_batch_size(b, m))
            rows.append((slot, k, busy))
            if busy > worst:
                slowest, slowest_b, worst = slot, b, busy
    # The buckets overlap the backward of the last micro-batch only (DDP syncs once per step).
    last = micro_batch_size(slowest_b, m)
    exposed = _exposed(ctx, slowest, last, allreduce) if n > 1 else 0.0
    layers = len(ctx.graph.layers)
    step = max(ctx.pricing.optimizer_s(s, 0, layers, ctx.optimizer) for s in slots)
    time_s = worst + exposed + step  # every replica steps once the all-reduce is done
    return DpEstimate(micro_batches=m, shares=shares, metrics=ctx.metrics_counts(time_s, rows))


def _accumulation(
    ctx: Context,
    slots: Sequence[str],
    shares: Sequence[Share],
    counts: Sequence[int],
    *,
    synced: bool,
) -> int | None:
    """Fewest micro-batches (a power of two) with which every replica fits in memory (the
    largest share of each group decides: memory grows with the batch)."""
    smallest = min(lo + (hi == c) for (lo, hi), c in zip(shares, counts, strict=True))
    m = 1
    while m <= smallest:
        largest = [lo + (hi > 0) for lo, hi in shares]
        if all(_fits(ctx, s, b, m, synced) for s, b in zip(slots, largest, strict=True)):
            return m
        m *= 2
    return None


def _fits(ctx: Context, slot: str, batch: int, m: int, synced: bool) -> bool:
    dtype = ctx.pricing.device_type(slot)
    tp = len(members(slot))
    micro = micro_batch_size(batch, m)
    layers = ctx.pricing.layer_mem(micro, 1, ctx.optimizer, synced=synced, tp=tp)
    need = framework_overhead_bytes(is_gpu(dtype)) + float(layers.sum())
    need += ctx.pricing.workspace(micro, tp)
    return need <= dtype.memory_bytes


def _exposed(ctx: Context, slowest: str, batch: int, allreduce: Callable[[float], float]) -> float:
    """Gradient allreduce left after the slowest replica's backward (DDP buckets, overlap)."""
    _, bwd = ctx.pricing.layers(slowest, batch)
    return exposed_sync(ctx, list(bwd), len(members(slowest)), 0, len(bwd), allreduce)


def exposed_sync(
    ctx: Context,
    bwd: Sequence[float],
    tp: int,
    start: int,
    end: int,
    allreduce: Callable[[float], float],
) -> float:
    """The all-reduce of the gradients of layers ``start:end`` in DDP's buckets, one TP rank
    of degree ``tp``'s (its shard of a split layer, a replicated layer whole), left after
    their backward ``bwd`` (per layer) ends: each bucket starts when its last layer's backward
    is done (``cost.comm.overlapped_allreduce_exposed``), as the simulator runs them."""
    key = (tp, start, end)
    buckets = ctx.buckets.get(key)
    if buckets is None:
        layers = ctx.graph.layers[start:end]
        buckets = ctx.buckets[key] = ddp_buckets(tp_grad_tensor_bytes(layers, ctx.graph.dtype, tp))
    memo: dict[float, float] = {}

    def cached(nbytes: float) -> float:
        if nbytes not in memo:
            memo[nbytes] = allreduce(nbytes)
        return memo[nbytes]

    return overlapped_allreduce_exposed(list(bwd), buckets, cached)
