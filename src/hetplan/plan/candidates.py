"""Candidate plans per strategy family, each with a quick screening estimate.

The estimate is a closed form over the partitioner's stage times (``plan.closed_form``: fill,
steady state, drain and the optimizer steps, plus an allreduce term), cheap enough to screen
every device subset; the search then refines the micro-batch count of the best and runs the
list-scheduling simulator on the best few of each family. Estimates never decide the final
ranking; ``tests/plan/test_screen_vs_simulator.py`` bounds how far they are from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from hetplan.cluster.spec import Cluster
from hetplan.cost.comm import allreduce_time, ps_sync_time
from hetplan.cost.comm_gloo import gloo_ps_phases
from hetplan.cost.contention import concurrent_cluster
from hetplan.cost.memory import (
    framework_overhead_bytes,
    is_gpu,
    tp_grad_tensor_bytes,
)
from hetplan.cost.ps_cpu import host_bytes
from hetplan.cost.threads import compute_kind
from hetplan.graph.types import ModelGraph
from hetplan.plan.closed_form import asynchronous_s, flushed_s
from hetplan.plan.context import Candidate, Context
from hetplan.plan.devices import group_balanced, groups_by_node, pipeline_orders
from hetplan.plan.partition import Partition, PartitionInfeasible, equal_split
from hetplan.plan.replicas import DpEstimate, dp_estimate, expand, exposed_sync
from hetplan.plan.slots import partition_costs, partition_for, stage_costs
from hetplan.plan.tp import SEP, members
from hetplan.planspec.batch import micro_batch_size, split_batch
from hetplan.planspec.plan import PipelinePlan, Plan, RecomputeMode, StagePlan
from hetplan.planspec.strategies import Strategy, spec_of
from hetplan.units import plural

MICROBATCH_FACTORS = (1, 2, 4)
"""Micro-batches tried per pipeline, as multiples of its number of stages (GPipe: m >= 4S
keeps the bubble (S-1)/(m+S-1) under ~20%, Huang et al. 2019); capped by the batch."""
COARSE_FACTOR = 2
"""Micro-batches per stage used when screening subsets, before refinement."""
MAX_MICROBATCHES = 128
"""Cap on micro-batches per replica (simulation cost grows with it; gains past it are tiny)."""
RECOMPUTE_FACTOR = 4.0 / 3.0
"""Recomputation redoes the forward (~1/3 of forward + backward): Chen et al. 2016, "Training
Deep Nets with Sublinear Memory Cost"; a screening factor, the simulator prices it exactly."""
RECOMPUTE_MODE: RecomputeMode = "all"
"""The mode the planner proposes when a plan needs recomputation to fit: every micro-batch.
torchgpipe's ``except_last`` saves one forward per stage and iteration but never lowers a
stage's peak under hetplan's orders (GPipe's backwards start at micro-batch 0, so the last
one is held whole beside the recomputed one; so on every 1F1B/PipeDream stage with warm-up
forwards; a stage whose backward follows each forward peaks at an earlier micro-batch's
recompute either way): docs/cost-models.md section 6."""
RECOMPUTE_LABEL = ", recompute all"
"""How a candidate's label says it recomputes (the plan table's plan column)."""
MAX_PIPELINE_STAGES = 32
"""Deepest single pipeline tried; deeper plans are hybrids of shorter pipelines."""


def grad_bytes(graph: ModelGraph, start: int = 0, end: int | None = None, tp: int = 1) -> float:
    """Gradient bytes of layers ``start:end`` as one TP rank of ``tp`` all-reduces them (fp32
    under mixed precision; its shard of split layers, replicated layers whole): what the DDP
    buckets of a hybrid's stage sync carry (``cost.memory.tp_grad_tensor_bytes``)."""
    tensors = tp_grad_tensor_bytes(graph.layers[start:end], graph.dtype, tp)
    return float(sum(sum(sizes) for sizes in tensors))


def dp_candidate(ctx: Context, devices: Sequence[str], *, equal: bool = False) -> Candidate | None:
    """Data parallel; the batch split in proportion to device speed (or equally), with
    gradient accumulation over the fewest micro-batches that fit in memory (None if none).
    Replicas of one device kind are priced once (``plan.replicas``)."""
    groups: dict[object, list[str]] = {}
    for d in devices:
        if SEP in d:
            key: object = d  # a TP group's cost depends on its members' links
        else:
            key = compute_kind(ctx.pricing.cluster.device(d))
        groups.setdefault(key, []).append(d)
    slots = [g[0] for g in groups.values()]
    counts = [len(g) for g in groups.values()]
    ring = [members(d)[0] for d in devices]  # one DP group per TP rank; they run in parallel
    tp_groups = [[members(d)[t] for d in devices] for t in range(len(members(devices[0])))]
    cluster = concurrent_cluster(tp_groups, ctx.pricing.cluster)  # sharing each node's card
    est = dp_estimate(
        ctx, slots, counts, lambda nbytes: allreduce_time(nbytes, ring, cluster), equal=equal
    )
    if est is None:
        return None
    placed = (list(groups.values()), tuple(devices))
    tp = len(members(devices[0]))
    return dp_from_estimate(ctx, est, lambda: placed, replicas=len(devices), tp=tp, equal=equal)


Placement = tuple[list[list[str]], tuple[str, ...]]
"""The slots of each replica group, and all slots in cluster order."""


def dp_from_estimate(
    ctx: Context,
    est: DpEstimate,
    place: Callable[[], Placement],
    *,
    replicas: int,
    tp: int,
    equal: bool,
) -> Candidate:
    """The candidate of ``est``; ``place`` gives the concrete slots, called only when the
    plan is built (a shortlisted candidate)."""
    m = est.micro_batches

    def build() -> Plan:
        groups, order = place()
        batch = {
            d: b
            for g, bs in zip(groups, expand(est.shares, [len(g) for g in groups]), strict=True)
            for d, b in zip(g, bs, strict=True)
        }
        names = ctx.layer_names
        pipes = [
            PipelinePlan(stages=[StagePlan(layers=list(names), devices=members(d))], batch=batch[d])
            for d in order
        ]
        return ctx.plan("dp", pipes, micro_batches=m)

    accumulate = f", {m} micro-batches" if m > 1 else ""
    label = f"dp x{replicas}" + (f" of tp{tp} groups" if tp > 1 else "")
    label += (" equal batch" if equal else " batch by speed") + accumulate
    return Candidate(
        family="dp",
        label=label,
        build=build,
        estimate=est.metrics,
        baseline="dp-equal" if equal else None,
    )


def ps_candidate(ctx: Context, devices: Sequence[str], dp: Candidate) -> Candidate:
    """Synchronous parameter server, one shard per worker (co-located, balanced by size), on
    the data-parallel candidate's batches. Screening estimate: the slowest worker's compute,
    then the push and pull of every shard (``cost.comm.ps_sync_time``, not overlapped; on CPU
    ranks gloo's reduce and broadcast, ``cost.comm_gloo``), then
    the optimizer step (the simulator's worker step after its pull)."""
    m = dp.plan.micro_batches
    busy = {
        d: m * ctx.pricing.step_time(d, micro_batch_size(p.batch, m))
        for d, p in zip(devices, dp.plan.pipelines, strict=True)
    }
    cluster = ctx.pricing.cluster
    timing = ps_sync_time(
        [b for sizes in tp_grad_tensor_bytes(ctx.graph.layers, ctx.graph.dtype) for b in sizes],
        list(devices),
        list(devices),
        cluster,
        policy="size",
    )
    sync = timing.sync_s
    if all(cluster.device(d).type.is_cpu for d in devices):  # gloo's calls, as predict prices
        hosts = host_bytes(list(devices), timing.shard_bytes)
        sync = sum(gloo_ps_phases(hosts, list(devices), cluster))
    layers = len(ctx.graph.layers)
    step = max(ctx.pricing.optimizer_s(d, 0, layers, ctx.optimizer) for d in devices)

    def build() -> Plan:
        return ctx.plan(
            "ps",
            dp.plan.pipelines,
            micro_batches=dp.plan.micro_batches,
            ps_devices=list(devices),
            ps_assignment="size",
        )

    label = f"ps x{len(devices)} co-located shards"
    estimate = ctx.metrics(max(busy.values()) + sync + step, busy)
    return Candidate(family="ps", label=label, build=build, estimate=estimate)


def _divisor_at_least(batch: int, target: int) -> int:
    """The smallest divisor of ``batch`` that is >= ``target``: torch.distributed.pipelining
    exchanges fixed-shape micro-batches, so executable counts divide the batch."""
    return next(d for d in range(max(target, 1), batch + 1) if batch % d == 0)


def micro_counts(stages: int, batch: int) -> list[int]:
    """Micro-batch counts worth trying for a pipeline of ``stages`` over ``batch`` samples:
    about S, 2S and 4S, each the next divisor of the batch."""
    cap = max(min(stages, batch), min(batch, MAX_MICROBATCHES))
    targets = {min(batch, cap, f * stages) for f in MICROBATCH_FACTORS}
    return sorted({_divisor_at_least(batch, t) for t in targets})


def coarse_count(stages: int, batch: int) -> int:
    """The micro-batch count used when screening (about 2S, a divisor of the batch)."""
    target = min(batch, max(min(stages, batch), min(MAX_MICROBATCHES, COARSE_FACTOR * stages)))
    return _divisor_at_least(batch, target)


def _stages(ctx: Context, part: Partition, devs: Sequence[str]) -> list[StagePlan]:
    names = ctx.layer_names
    return [
        StagePlan(layers=names[i:j], devices=members(devs[s]))
        for (i, j), s in zip(part.stages, part.slots, strict=True)
    ]


def pipeline_candidates(
    ctx: Context, devices: Sequence[str], strategies: Sequence[Strategy], *, orders: int = 2
) -> list[Candidate]:
    """Single pipelines over ``devices`` in up to ``orders`` stage orders (coarse count)."""
    if len(devices) > MAX_PIPELINE_STAGES:
        return []
    speed = {d: ctx.pricing.speed(d, 1) for d in devices}
    out = []
    for order in pipeline_orders(ctx.pricing.cluster, devices, speed)[:orders]:
        m = coarse_count(len(order), ctx.batch)
        for strategy in strategies:
            cand = pipeline_at(ctx, strategy, (tuple(order),), m)
            if cand is not None:
                out.append(cand)
    return out


def pipeline_at(
    ctx: Context, strategy: Strategy, slots: tuple[tuple[str, ...], ...], m: int
) -> Candidate | None:
    """A pipelined candidate (single pipeline or hybrid) over ``slots`` with ``m`` micro-batches."""
    spec = spec_of(strategy)
    if spec.shape == "pipelines":
        return _hybrid_at(ctx, slots, m)
    order = slots[0]
    micro = micro_batch_size(ctx.batch, m)
    recompute = False
    try:
        part = partition_for(ctx, (slots, (micro,)), strategy, m)
    except PartitionInfeasible:
        try:  # memory-short: keep only stage inputs, recompute the rest in backward
            part = partition_for(ctx, (slots, (micro,)), strategy, m, recompute=True)
        except PartitionInfeasible:
            return None
        recompute = True
    redo = RECOMPUTE_FACTOR if recompute else 1.0
    costs = partition_costs(ctx, (slots, (micro,)), part)
    if spec.continuous:
        time_s = asynchronous_s(costs, m) * redo  # asynchronous: no flush, steady state
    else:
        time_s = flushed_s(costs, m, spec.order) * redo
    busy = {order[s]: c * m * redo for s, c in zip(part.slots, part.compute_times, strict=True)}
    plan = ctx.plan(
        strategy,
        [PipelinePlan(stages=_stages(ctx, part, order), batch=ctx.batch)],
        micro_batches=m,
        recompute=recompute,
        recompute_mode=RECOMPUTE_MODE,
    )
    return Candidate(
        family=strategy,
        label=f"{strategy} {_shape_label(part.num_stages, m)}"
        + (RECOMPUTE_LABEL if recompute else ""),
        build=lambda: plan,
        estimate=ctx.metrics(time_s, busy),
        slots=slots,
    )


def refine(ctx: Context, cand: Candidate) -> list[Candidate]:
    """The same slots with every other micro-batch count worth trying."""
    if not cand.slots:
        return []
    stages = len(cand.slots[0])
    batch = min(p.batch for p in cand.plan.pipelines)
    out = []
    for m in micro_counts(stages, batch):
        if m != cand.plan.micro_batches:
            other = pipeline_at(ctx, cand.plan.strategy, cand.slots, m)
            if other is not None:
                out.append(other)
    return out


def equal_pipeline(ctx: Context, devices: Sequence[str]) -> Candidate:
    """Baseline: GPipe over the devices in cluster order with equal layer counts."""
    n = min(len(devices), len(ctx.graph.layers))
    m = _divisor_at_least(ctx.batch, min(ctx.batch, 4 * n, max(n, MAX_MICROBATCHES)))
    micro = ctx.batch // m
    names = ctx.layer_names
    bounds = equal_split(len(names), n)
    stages = [StagePlan(layers=names[i:j], devices=[devices[k]]) for k, (i, j) in enumerate(bounds)]
    busy = {}
    fits = True
    layer_mem = ctx.pricing.layer_mem(micro, m, ctx.optimizer)
    costs = stage_costs(ctx, [(devices[:n], micro)], bounds)
    for k, (i, j) in enumerate(bounds):
        busy[devices[k]] = (costs.fwd[k] + costs.bwd[k]) * m
        dtype = ctx.pricing.device_type(devices[k])
        need = framework_overhead_bytes(is_gpu(dtype)) + float(layer_mem[i:j].sum())
        need += ctx.pricing.workspace(micro)
        fits = fits and need <= dtype.memory_bytes
    redo = 1.0 if fits else RECOMPUTE_FACTOR
    time_s = flushed_s(costs, m, spec_of("gpipe").order) * redo
    plan = ctx.plan(
        "gpipe",
        [PipelinePlan(stages=stages, batch=ctx.batch)],
        micro_batches=m,
        recompute=not fits,
        recompute_mode=RECOMPUTE_MODE,
    )
    return Candidate(
        family="gpipe",
        label=f"gpipe {plural(n, 'stage')} equal layers, {_micro(m)}"
        + ("" if fits else RECOMPUTE_LABEL),
        build=lambda: plan,
        estimate=ctx.metrics(time_s, busy),
        baseline="equal-pipeline",
    )


def hybrid_candidates(ctx: Context, devices: Sequence[str]) -> list[Candidate]:
    """Virtual workers (HetPipe): one per node, and balanced groups (Algorithm 2), screened at
    the coarse micro-batch count."""
    cluster = ctx.pricing.cluster
    speed = {d: ctx.pricing.speed(d, 1) for d in devices}
    groupings: list[list[list[str]]] = []
    by_node = groups_by_node(cluster, devices)
    if len(by_node) > 1 and len({len(g) for g in by_node}) == 1 and len(by_node[0]) > 1:
        groupings.append(by_node)
    n = len(devices)
    for k in range(2, n // 2 + 1):
        if n % k == 0 and n // k <= MAX_PIPELINE_STAGES:
            groupings.append(group_balanced(devices, speed, k))
    out = []
    for groups in groupings:
        slots = tuple(tuple(sorted(g, key=lambda d: (-speed[d], d))) for g in groups)
        shares = _hybrid_shares(ctx, slots)
        cand = _hybrid_at(ctx, slots, coarse_count(len(slots[0]), min(shares)))
        if cand is not None:
            out.append(cand)
    return out


def _hybrid_shares(ctx: Context, slots: tuple[tuple[str, ...], ...], m: int = 1) -> list[int]:
    """Per-replica batch in proportion to the replica's summed device speed, in whole
    multiples of ``m`` micro-batches when the batch allows (so the plan is executable)."""
    weights = [sum(ctx.pricing.speed(d, 1) for d in g) for g in slots]
    if ctx.batch % m == 0 and ctx.batch // m >= len(slots):
        return [units * m for units in split_batch(ctx.batch // m, weights)]
    return split_batch(ctx.batch, weights)


def _hybrid_at(ctx: Context, slots: tuple[tuple[str, ...], ...], m: int) -> Candidate | None:
    shares = _hybrid_shares(ctx, slots, m)
    if m > min(shares):
        return None
    micro = tuple(micro_batch_size(b, m) for b in shares)
    try:
        part = partition_for(ctx, (slots, micro), "hybrid", m)
    except PartitionInfeasible:
        return None
    costs = partition_costs(ctx, (slots, micro), part)
    costs = dataclasses.replace(costs, sync=_hybrid_syncs(ctx, slots, micro, part))
    pipe_time = flushed_s(costs, m, spec_of("hybrid").order)
    busy = {g[s]: c * m for g in slots for s, c in zip(part.slots, part.compute_times, strict=True)}
    pipes = [
        PipelinePlan(stages=_stages(ctx, part, g), batch=b)
        for g, b in zip(slots, shares, strict=True)
    ]
    return Candidate(
        family="hybrid",
        label=f"hybrid {len(slots)} x {_shape_label(part.num_stages, m)}",
        build=lambda: ctx.plan("hybrid", pipes, micro_batches=m),
        estimate=ctx.metrics(pipe_time, busy),
        slots=slots,
    )


def _hybrid_syncs(
    ctx: Context, slots: tuple[tuple[str, ...], ...], micro: tuple[int, ...], part: Partition
) -> tuple[float, ...]:
    """Per stage, its gradient all-reduce across the replicas (one per TP rank, at once) left
    after the slowest replica's last backward (``replicas.exposed_sync``)."""
    out = []
    for (i, j), s in zip(part.stages, part.slots, strict=True):
        bwd = np.max(
            [ctx.pricing.layers(g[s], b)[1][i:j] for g, b in zip(slots, micro, strict=True)], axis=0
        )
        ring = [members(g[s])[0] for g in slots]
        tp_groups = [[members(g[s])[t] for g in slots] for t in range(len(members(slots[0][s])))]
        shared = concurrent_cluster(tp_groups, ctx.pricing.cluster)  # one card, tp streams

        def allreduce(nbytes: float, ring: list[str] = ring, shared: Cluster = shared) -> float:
            return allreduce_time(nbytes, ring, shared)

        out.append(exposed_sync(ctx, list(bwd), len(members(slots[0][s])), i, j, allreduce))
    return tuple(out)


def _micro(m: int) -> str:
    return plural(m, "micro-batch", "micro-batches")


def _shape_label(stages: int, m: int) -> str:
    """``2 stages, 4 micro-batches`` (``1 stage, 1 micro-batch``)."""
    return f"{plural(stages, 'stage')}, {_micro(m)}"
