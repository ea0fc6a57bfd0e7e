"""Price a sharded data-parallel plan (strategy ``fsdp``: FSDP2, ZeRO-2 or 3): its work for
the schedule and each rank's memory.

Every replica runs the whole model on its batch share, one FSDP2 group per layer
(:mod:`hetplan.cost.sharded`). The groups' all-gathers and reduce-scatters are collectives of
every replica at once, so the replicas move through the layers in lock step: a layer takes
the slowest replica's time for it, and each pass (forward, backward, per micro-batch) is
priced as :func:`hetplan.cost.sharded.gathered_pass` of those times and the ring times of its
collectives on the replicas' links (in the order the plan lists the replicas). The result is
one :class:`StageWork` per replica with equal forward and backward times and no gradient
buckets (FSDP2 reduce-scatters inside the backward); each optimizer step updates only the
replica's shard, plus the host's cost of stepping DTensors
(:func:`hetplan.cost.dtensor.fsdp_step_host_s`).

A hybrid plan with ``shard_stages`` (pipelines of FSDP2-sharded stages) prices each stage the
same way over that stage's replicas (:func:`sharded_stage`, :func:`sharded_stages`), inside
the pipeline schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hetplan.cluster.spec import Cluster, Link
from hetplan.cost.comm_collectives import ring_links, ring_phase_time_links
from hetplan.cost.dtensor import fsdp_step_host_s
from hetplan.cost.memory import (
    OPTIMIZER_SLOTS,
    OPTIMIZER_STATE_BYTES,
    MemoryBreakdown,
    grad_scale,
    optimizer_step_s,
    weight_scale,
)
from hetplan.cost.ps_cpu import copy_s
from hetplan.cost.sharded import (
    ZeroStage,
    chunk_rows,
    gathered_pass,
    group_gathered_bytes,
    group_shard_bytes,
    layer_tensors,
    rank_memory,
)
from hetplan.cost.tp_compute import tp_rank_costs
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.planspec.batch import micro_batch_size
from hetplan.planspec.dtypes import DTYPE_BYTES
from hetplan.planspec.plan import Plan
from hetplan.schedule.work import PipelineWork, PricedWork, StageWork

# gloo's all_gather_into_tensor and reduce_scatter_tensor (FSDP2's collectives) against its
# all_reduce of the same whole buffer, CPU ranks pinned one per core: medians over 2-4 ranks
# and 2.4-9.4 MB of ``benchmarks/bench_gloo_shard_collectives.py`` (AG 0.53-1.06, RS
# 1.00-1.82; 2026-11-28, docs/benchmarks.md). A ring would move half an all-reduce's bytes
# (0.5); gloo does not reach that here. Dimensionless.
GLOO_ALL_GATHER_VS_ALL_REDUCE = 0.9
GLOO_REDUCE_SCATTER_VS_ALL_REDUCE = 1.35
# A small all-gather or reduce-scatter (no bytes to speak of) against gloo's all-reduce of the
# same buffer, called back to back as a step calls them: 0.73-1.03 over 2-4 ranks (one or two
# to a core), median 0.86 (``benchmarks/bench_fsdp_calls.py``, 3 runs per cluster file,
# 2026-11-29). Not the ring's half: a gloo call costs about the same however many steps its
# algorithm has. Dimensionless.
GLOO_SHARD_CALL_VS_ALL_REDUCE = 0.86
# What FSDP2 adds to each collective call on a CPU rank with a core to itself (its hooks, the
# copies in and out of tiny buffers, DTensor bookkeeping), beyond the bare collective: 0.18,
# 0.35, 0.36, 0.32 ms in 4 runs on 2 ranks one per core, median 0.34
# (``benchmarks/bench_fsdp_calls.py``, 16 groups of 32x32 linear layers, 2026-11-29). Divided
# by the rank's speed on a shared core (measured there: 0.8-1.8 ms, which that leaves 30-60%
# short). Seconds per call.
FSDP2_CALL_HOST_S = 0.34e-3


def replica_devices(plan: Plan) -> list[str]:
    """The shard group: each replica's device, in plan order (the ring's order)."""
    return [p.stages[0].devices[0] for p in plan.pipelines]


def collective_times(
    devices: Sequence[str],
    graph: ModelGraph,
    cluster: Cluster,
    layers: Sequence[LayerInfo] | None = None,
) -> tuple[list[float], list[float]]:
    """Per layer of ``layers`` (default: the graph's), (all-gather s, reduce-scatter s) over
    the ring of ``devices`` (the shard group, in plan order): the fp32 weights of a
    mixed-precision graph are gathered (FSDP2 without a mixed-precision policy), its fp32
    gradients scattered; each call pays the cluster's per-collective overhead, as an
    all-reduce does. On CPU ranks (gloo) each costs its measured share of an all-reduce's
    fixed cost and bytes, plus FSDP2's copy of the buffer and its hooks
    (:data:`FSDP2_CALL_HOST_S`) on the slowest rank's core (:func:`gloo_collective_s`)."""
    links = ring_links(list(devices), cluster)
    n = len(devices)
    on_cpu = all(cluster.device(d).type.is_cpu for d in devices)
    speed = min(cluster.device(d).speed for d in devices)
    w, g = weight_scale(graph.dtype), grad_scale(graph.dtype)
    gathers, scatters = [], []
    for layer in graph.layers if layers is None else layers:
        whole = group_gathered_bytes(layer_tensors(layer), n)
        call = cluster.collective_overhead_s if whole > 0 else 0.0  # once per call, §3.5
        call += FSDP2_CALL_HOST_S / speed if on_cpu and whole > 0 else 0.0  # FSDP2's hooks
        if on_cpu:
            gather = gloo_collective_s(whole * w, links, GLOO_ALL_GATHER_VS_ALL_REDUCE, speed)
            scatter = gloo_collective_s(whole * g, links, GLOO_REDUCE_SCATTER_VS_ALL_REDUCE, speed)
        else:
            gather = ring_phase_time_links(whole * w, links)
            scatter = ring_phase_time_links(whole * g, links)
        gathers.append(gather + call)
        scatters.append(scatter + call)
    return gathers, scatters


def gloo_collective_s(whole: float, links: Sequence[Link], ratio: float, speed: float) -> float:
    """An all-gather or reduce-scatter of a ``whole``-byte buffer over CPU ranks: the call's
    fixed cost (:func:`gloo_call_s`), its bytes ``2 x ratio`` a ring phase's (``ratio`` x an
    all-reduce's, as measured where the bytes dominate), and FSDP2's copy of the whole buffer
    (the gathered buffer out into the parameters, the gradients into the reduce-scatter's
    input) at :data:`hetplan.cost.ps_cpu.COPY_BANDWIDTH` on a core of ``speed``."""
    if whole <= 0:
        return 0.0
    bare = [replace(link, latency_s=0.0) for link in links]
    moved = ring_phase_time_links(2.0 * ratio * whole, bare)
    return moved + gloo_call_s(links) + copy_s(whole) / speed


def gloo_call_s(links: Sequence[Link]) -> float:
    """The fixed cost of one gloo all-gather or reduce-scatter over the ring ``links``:
    :data:`GLOO_SHARD_CALL_VS_ALL_REDUCE` of an all-reduce's ``2 (W - 1)`` step latencies."""
    latency = max((link.latency_s for link in links), default=0.0)
    return GLOO_SHARD_CALL_VS_ALL_REDUCE * 2 * (len(links) - 1) * latency


def pass_times(
    fwd: Sequence[float],
    bwd: Sequence[float],
    collectives: tuple[Sequence[float], Sequence[float]],
    *,
    zero: int,
    overlap: bool,
) -> tuple[float, float]:
    """(forward s, backward s) of one micro-batch in lock step: per layer the slowest
    replica's ``fwd``/``bwd`` and the ``collectives`` (all-gathers, reduce-scatters) of
    :func:`collective_times`, as :func:`hetplan.cost.sharded.gathered_pass` runs them (the
    backward in reverse layer order, gathering again under ZeRO-3)."""
    gathers, scatters = collectives
    again = list(gathers[::-1]) if zero == 3 else [0.0] * len(gathers)
    fwd_s = gathered_pass(fwd, gathers, overlap=overlap)
    return fwd_s, gathered_pass(bwd[::-1], again, scatters[::-1], overlap=overlap)


def fsdp_work(plan: Plan, graph: ModelGraph, cluster: Cluster, compute: ComputeModel) -> PricedWork:
    """The priced work of an ``fsdp`` plan (see the module's docstring)."""
    mbs = [micro_batch_size(p.batch, plan.micro_batches) for p in plan.pipelines]
    stage, sources = sharded_stage(plan, graph, cluster, compute, (0, len(graph.layers) - 1))
    pipes = [
        PipelineWork(stages=(replace(stage[r], devices=(dev,)),), batch=pipe.batch)
        for r, (dev, pipe) in enumerate(zip(replica_devices(plan), plan.pipelines, strict=True))
    ]
    return PricedWork(
        pipes=pipes,
        buckets=[],
        ps=[],
        micro_batch=mbs,
        bucket_bytes=[0.0],
        sources=tuple(sorted({src for _, _, src in sources})),
        layer_sources=tuple(sources),
    )


def sharded_stage(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    span: tuple[int, int],
    stage: int = 0,
) -> tuple[list[StageWork], dict[tuple[str, str, str], None]]:
    """Per replica, the work of stage ``stage`` (layers ``span``, inclusive) sharded over the
    stage's replicas (its device in every pipeline, in plan order), and the cost sources by
    (device kind, layer, source): every pass in lock step (the module's docstring), the
    optimizer stepping the replica's shard of the stage."""
    lo, hi = span
    layers = graph.layers[lo : hi + 1]
    devices = [cluster.device(p.stages[stage].devices[0]) for p in plan.pipelines]
    mbs = [micro_batch_size(p.batch, plan.micro_batches) for p in plan.pipelines]
    fwd = [0.0] * len(layers)
    bwd = [0.0] * len(layers)
    sources: dict[tuple[str, str, str], None] = {}
    for dev, mb in zip(devices, mbs, strict=True):
        costs = tp_rank_costs(compute, graph, dev, mb, 1)[lo : hi + 1]
        for k, c in enumerate(costs):
            fwd[k] = max(fwd[k], c.fwd_s)
            bwd[k] = max(bwd[k], c.bwd_s + (c.fwd_s if plan.recompute else 0.0))
            sources[(dev.type.name, layers[k].name, c.source)] = None
    ids = [d.id for d in devices]
    collectives = collective_times(ids, graph, cluster, layers)
    overlap = not all(d.type.is_cpu for d in devices)
    fwd_s, bwd_s = pass_times(fwd, bwd, collectives, zero=plan.zero, overlap=overlap)
    share = shard_share(graph, len(devices), layers)
    work = [
        StageWork(
            devices=(dev.id,), fwd_s=fwd_s, bwd_s=bwd_s,
            opt_s=share * optimizer_step_s(compute, graph, dev, layers, plan.optimizer, 1)
            + fsdp_step_host_s(layers, dev.type.is_cpu),
            on_cores=dev.type.is_cpu,
        )
        for dev in devices
    ]  # fmt: skip
    return work, sources


def sharded_stages(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    ranges: list[list[tuple[int, int]]],
    pipes: Sequence[PipelineWork],
) -> list[PipelineWork]:
    """``pipes`` (a pipelined plan priced without gradient synchronisation) with every
    stage's passes and step those of :func:`sharded_stage` over its replicas."""
    per_stage = [
        sharded_stage(plan, graph, cluster, compute, ranges[0][s], s)[0]
        for s in range(plan.num_stages)
    ]
    return [
        replace(
            pipe,
            stages=tuple(
                replace(st, fwd_s=w.fwd_s, bwd_s=w.bwd_s, bwd_parts=(), opt_s=w.opt_s)
                for st, w in zip(pipe.stages, (ws[r] for ws in per_stage), strict=True)
            ),
        )
        for r, pipe in enumerate(pipes)
    ]


def shard_share(graph: ModelGraph, n: int, layers: Sequence[LayerInfo] | None = None) -> float:
    """The fraction of ``layers``' (default: the model's) parameter bytes one rank's
    optimizer steps (its padded shard: an upper bound on its own rows)."""
    tensors = [layer_tensors(layer) for layer in (graph.layers if layers is None else layers)]
    whole = sum(t.nbytes for ts in tensors for t in ts)
    return sum(group_shard_bytes(ts, n) for ts in tensors) / whole if whole else 0.0


def step_sent_bytes(plan: Plan, graph: ModelGraph) -> float:
    """Bytes one rank sends per step over the ring (all micro-batches)."""
    n = len(plan.pipelines)
    w, g = weight_scale(graph.dtype), grad_scale(graph.dtype)
    whole = [group_gathered_bytes(layer_tensors(x), n) for x in graph.layers]
    per_micro = sum(b * (w * (2 if plan.zero == 3 else 1) + g) for b in whole)
    return plan.micro_batches * per_micro * (n - 1) / n if n > 1 else 0.0


def sharded_breakdown(
    whole: MemoryBreakdown,
    plan: Plan,
    graph: ModelGraph,
    replica: int,
    layers: Sequence[LayerInfo] | None = None,
) -> MemoryBreakdown:
    """Replica ``replica``'s peak memory: ``whole`` (the data-parallel breakdown of the
    stage of ``layers``, default the whole model, on that rank: activations, autocast's
    copies, workspace and input as a replica holds them) with the state replaced by the
    rank's shards (:func:`hetplan.cost.sharded.rank_memory`):
    padded weight and gradient shards, its own rows' optimizer state, the gathered groups
    (``gathered``) and the largest group's whole gradients before its reduce-scatter
    (``grads``); no gradient buckets. Weights and gradients in fp32 under mixed precision,
    as FSDP2 keeps them without a mixed-precision policy."""
    parts = state_parts(
        graph, len(plan.pipelines), plan.optimizer, zero=plan.zero, rank=replica, layers=layers
    )
    return whole.with_terms(**parts, comm_buffers=0.0)


def state_parts(
    graph: ModelGraph,
    n: int,
    optimizer: str,
    *,
    zero: int,
    rank: int = 0,
    layers: Sequence[LayerInfo] | None = None,
) -> dict[str, float]:
    """Rank ``rank`` of ``n``'s state bytes of ``layers`` (default: the model's) by
    :class:`MemoryBreakdown` field (weights, grads with the largest group's whole gradients,
    optimizer, gathered), in the runtime's dtypes (fp32 weights and gradients under mixed
    precision)."""
    groups = [layer_tensors(x) for x in (graph.layers if layers is None else layers)]
    w, g = weight_scale(graph.dtype), grad_scale(graph.dtype)
    state = OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES / DTYPE_BYTES[graph.dtype]
    stage: ZeroStage = 3 if zero == 3 else 2
    mem = rank_memory(
        groups, n, rank, stage=stage, state_bytes_per_param_byte=state, grad_scale=g,
        weight_scale=w,
    )  # fmt: skip
    return {
        "weights": mem.weights,
        "grads": mem.grads + mem.unsharded_grads,
        "optimizer": mem.optimizer,
        "gathered": mem.gathered,
    }


def rank_state_bytes(graph: ModelGraph, n: int, optimizer: str, *, zero: int) -> float:
    """The most state bytes a rank of ``n`` holds (rank 0 owns the most rows)."""
    return sum(state_parts(graph, n, optimizer, zero=zero).values())


def rank_breakpoints(layers: Sequence[LayerInfo], n: int) -> list[int]:
    """The ranks of ``n`` at which some tensor of ``layers`` changes how many unpadded rows a
    rank owns (``torch.chunk``: ``c`` rows up to rank ``rows // c``, then a part, then none):
    ranks between two breakpoints hold the same bytes (:func:`state_parts`), so a memory
    model prices one rank of each run (``bisect_right(breakpoints, rank)``)."""
    out: set[int] = set()
    for layer in layers:
        for t in layer_tensors(layer):
            full = t.rows // chunk_rows(t.rows, n)
            out.update((full, full + 1))
    return sorted(out)
