"""Sharded data-parallel candidates (strategy ``fsdp``) for the screening.

On a subset of single devices: the batch split by speed as data parallelism splits it
(``plan.replicas``), the fewest micro-batches (a power of two) with which every replica fits
its padded shard of the model state, one micro-batch's activations and the gathered layers
(``predict.sharded``), and ZeRO-3. A subset whose devices cannot each hold the whole model is
where this family can win: its state per rank falls as ``1 / n``.

Screening estimate: what the simulation prices (``predict.sharded.pass_times``: each layer at
its slowest replica's time, its all-gathers and reduce-scatters over the subset's ring one
gather ahead on GPUs and in series on CPU cores), from the screening's per-layer times, plus
the shard's share of the optimizer step and the host's DTensor cost on CPU ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hetplan.cost.dtensor import fsdp_step_host_s
from hetplan.cost.memory import (
    LayerBytes,
    framework_overhead_bytes,
    is_gpu,
    layer_bytes,
)
from hetplan.cost.threads import compute_kind
from hetplan.plan.context import Candidate, Context
from hetplan.plan.replicas import expand, split_groups
from hetplan.plan.tp import SEP
from hetplan.planspec.batch import micro_batch_size
from hetplan.planspec.plan import PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.predict.sharded import (
    collective_times,
    pass_times,
    rank_state_bytes,
    replica_devices,
    shard_share,
)
from hetplan.predict.zero1 import broadcasts_s, owned_fractions

ZERO = 3  # the stage the planner proposes: FSDP2's default, the least state per rank


def fsdp_candidate(ctx: Context, devices: Sequence[str]) -> Candidate | None:
    """The sharded candidate on ``devices`` (two or more single devices), or None when no
    micro-batch count fits or a device is a tensor-parallel group."""
    if len(devices) < 2 or any(SEP in d for d in devices):
        return None
    groups: dict[object, list[str]] = {}
    for d in devices:
        groups.setdefault(compute_kind(ctx.pricing.cluster.device(d)), []).append(d)
    slots = [g[0] for g in groups.values()]
    counts = [len(g) for g in groups.values()]
    n = len(devices)
    ref = max(1, ctx.batch // n)
    shares = split_groups(ctx.batch, [ctx.pricing.speed(s, ref) for s in slots], counts)
    state = rank_state_bytes(ctx.graph, n, ctx.optimizer, zero=ZERO)
    m = _micro_batches(ctx, slots, [lo + (hi > 0) for lo, hi in shares], state, min_batch(shares))
    if m is None:
        return None
    layers = {
        s: ctx.pricing.layers(s, micro_batch_size(lo + (hi > 0), m))
        for s, (lo, hi) in zip(slots, shares, strict=True)
    }
    busy = {s: m * float(f.sum() + b.sum()) for s, (f, b) in layers.items()}
    fwd = np.max([f for f, _ in layers.values()], axis=0)  # lock step: each layer's slowest
    bwd = np.max([b for _, b in layers.values()], axis=0)
    on_cores = all(ctx.pricing.cluster.device(d).type.is_cpu for d in devices)
    collectives = collective_times(devices, ctx.graph, ctx.pricing.cluster)
    passes = pass_times(list(fwd), list(bwd), collectives, zero=ZERO, overlap=not on_cores)
    step = max(ctx.pricing.optimizer_s(s, 0, len(ctx.graph.layers), ctx.optimizer) for s in slots)
    host = fsdp_step_host_s(ctx.graph.layers, on_cores)
    time_s = m * sum(passes) + shard_share(ctx.graph, n) * step + host
    rows = [(s, c, busy[s]) for s, c in zip(slots, counts, strict=True)]

    def build() -> Plan:
        batch = {
            d: b
            for g, bs in zip(groups.values(), expand(shares, counts), strict=True)
            for d, b in zip(g, bs, strict=True)
        }
        names = list(ctx.layer_names)
        pipes = [
            PipelinePlan(stages=[StagePlan(layers=names, devices=[d])], batch=batch[d])
            for d in devices
        ]
        return ctx.plan("fsdp", pipes, micro_batches=m, zero=ZERO)

    accumulate = f", {m} micro-batches" if m > 1 else ""
    return Candidate(
        family="fsdp",
        label=f"fsdp x{n} zero-{ZERO} batch by speed{accumulate}",
        build=build,
        estimate=ctx.metrics_counts(time_s, rows),
    )


def zero1_candidate(ctx: Context, dp: Candidate) -> Candidate | None:
    """ZeRO-1 on the data-parallel candidate's replicas and batches (None for fewer than two
    single devices): its estimate less the slowest whole optimizer step, plus each rank's
    step over its owned tensors (torch's partition, ``predict.zero1``) at its slowest and the
    owners' broadcasts, as the simulator prices it."""
    plan = dp.plan
    devices = replica_devices(plan)
    if len(devices) < 2 or plan.tp > 1:
        return None
    layers = len(ctx.graph.layers)
    steps = [ctx.pricing.optimizer_s(d, 0, layers, ctx.optimizer) for d in devices]
    shares = owned_fractions(ctx.graph, len(devices))
    owned = max(s * f for s, f in zip(steps, shares, strict=True))
    sync = broadcasts_s(devices, ctx.graph, ctx.pricing.cluster)
    time_s = dp.estimate.time_s - max(steps) + owned + sync
    busy = {
        d: plan.micro_batches
        * ctx.pricing.step_time(d, micro_batch_size(p.batch, plan.micro_batches))
        for d, p in zip(devices, plan.pipelines, strict=True)
    }

    def build() -> Plan:
        return replace(plan, strategy="fsdp", zero=1)

    return Candidate(
        family="fsdp",
        label=f"fsdp x{len(devices)} zero-1 (optimizer state sharded) {dp.label.split(' ', 2)[-1]}",
        build=build,
        estimate=ctx.metrics(time_s, busy),
    )


def min_batch(shares: Sequence[tuple[int, int]]) -> int:
    """The smallest replica batch: micro-batches cannot outnumber its samples."""
    return min(lo for lo, _ in shares)


def _micro_batches(
    ctx: Context, slots: Sequence[str], batches: Sequence[int], state: float, most: int
) -> int | None:
    """Fewest micro-batches (a power of two, at most ``most``) with which every slot holds
    ``state`` bytes of shards and gathered layers and one micro-batch's activations."""
    per = layer_bytes(ctx.graph.layers, optimizer=ctx.optimizer, dtype=ctx.graph.dtype)
    m = 1
    while m <= most:
        if all(
            _fits(ctx, per, s, micro_batch_size(b, m), state)
            for s, b in zip(slots, batches, strict=True)
        ):
            return m
        m *= 2
    return None


def _fits(ctx: Context, per: LayerBytes, slot: str, micro: int, state: float) -> bool:
    """Framework + workspace + the per-layer terms other than the whole state + ``state``
    within the slot's memory."""
    parts = per.parts(micro_batch=micro, kept=1, copies=1, stashed_versions=0)
    transient = sum(float(v.sum()) for k, v in parts.items() if k not in _STATE)
    kind = ctx.pricing.device_type(slot)
    need = framework_overhead_bytes(is_gpu(kind)) + ctx.pricing.workspace(micro) + transient
    return need + state <= kind.memory_bytes


_STATE = ("weights", "grads", "optimizer")


def sharded_hybrid(ctx: Context, cand: Candidate) -> Candidate | None:
    """The hybrid candidate ``cand`` (BSP, no tensor parallelism) with FSDP2-sharded stages at
    ZeRO-3 (``shard_stages``), or None for any other candidate. Its estimate is the
    simulation's (``predict``): few hybrids are refined, and the sharded stages' lock step
    has no closed form in the screening."""
    plan = cand.plan
    if plan.strategy != "hybrid" or plan.sync != "bsp" or plan.tp > 1 or plan.shard_stages:
        return None
    sharded = replace(plan, shard_stages=True, zero=3)
    pred = predict(sharded, ctx.graph, ctx.pricing.cluster, ctx.pricing.compute)
    busy = {d.id: d.compute_s for d in pred.devices}
    return Candidate(
        family="hybrid",
        label=f"{cand.label}, stages sharded (fsdp zero-3)",
        build=lambda: sharded,
        estimate=ctx.metrics(pred.iteration_time_s, busy),
    )
