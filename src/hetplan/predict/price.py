"""Price a plan: per-micro-batch stage times, cut transfers, gradient buckets, PS transfers.

Conventions (see docs/models.md):

- micro-batch size of a pipeline = ``ceil(batch / micro_batches)``
  (``planspec.batch.micro_batch_size``): with an uneven split every micro-batch is priced at
  the larger size (slightly pessimistic);
- a tensor-parallel stage: each member computes its share of the layers tensor parallelism
  splits (Megatron-style units, the vocabulary-split embedding and head), priced at ``1/tp``
  of the micro-batch so that smaller matrices run at their own efficiency
  (``cost.tp_compute``), and all of the replicated ones; the slowest member bounds it, plus
  each split layer's all-reduces forward and backward (``cost.tp.tp_comm_time``; with
  recomputation the forward ones run again in the backward);
- cut transfers: ``graph.cut_bytes[last layer] * micro-batch`` bytes each way (activations
  forward, their gradients backward: same size), over ``cluster.link``; between TP groups
  rank ``t`` sends the whole (replicated) values to rank ``t`` of the next stage, all pairs at
  once (the slowest pair counts);
- gradient buckets (several replicas only): DDP's buckets over the stage's parameter tensors;
  the last micro-batch's backward is split at their ready points;
- recomputation re-runs each layer's forward in its backward, for every micro-batch
  (``recompute_mode`` ``all``) or all but each iteration's last (``except_last``: that one's
  backward, ``StageWork.parts``, is priced without it);
- mixed precision (model dtype bf16/fp16: autocast over fp32 master weights): gradients, DDP
  buckets and PS pushes and pulls are fp32 (``cost.memory.tp_grad_tensor_bytes``: twice the
  graph's 2 B/param ``param_tensor_bytes``); activations crossing a cut and TP forward
  all-reduces of units stay at the graph's low precision (TP backward ones are fp32); the
  optimizer step moves fp32 p, g and state as in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import zip_longest

from hetplan.cluster.spec import Cluster, Device
from hetplan.cost import comm
from hetplan.cost.bucket_cpu import flattened_parts, writeback_s
from hetplan.cost.comm_buckets import first_bucket
from hetplan.cost.comm_gloo import gloo_ps_phases
from hetplan.cost.contention import concurrent_cluster
from hetplan.cost.memory import is_gpu, optimizer_step_s, tp_grad_tensor_bytes
from hetplan.cost.ps_cpu import PsCpuWork, host_bytes, ps_cpu_work
from hetplan.cost.ties import tie_sync_s
from hetplan.cost.tp import tp_comm_times, tp_traffic
from hetplan.cost.tp_compute import tp_rank_costs
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.planspec.batch import micro_batch_size
from hetplan.planspec.plan import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.predict.cpu_overlap import shared_core
from hetplan.predict.sharded import fsdp_work, replica_devices, sharded_stages
from hetplan.predict.sharing import core_groups
from hetplan.predict.zero1 import zero1_pipes
from hetplan.schedule.work import (
    CutWork,
    PipelineWork,
    PricedWork,
    PsWork,
    StageWork,
    SyncBucket,
    split_backward,
)
from hetplan.units import MiB


def _stage_compute(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    devices: list[Device],
    rng: tuple[int, int],
    mb: int,
) -> tuple[float, list[float], float, dict[tuple[str, str, str], None]]:
    """(forward s, per-layer backward s, optimizer s, (device type, layer, source) of each
    layer) of one stage per micro-batch."""
    lo, hi = rng
    tp = len(devices)
    layers = graph.layers[lo : hi + 1]
    fwd, bwd = 0.0, [0.0] * (hi - lo + 1)
    sources: dict[tuple[str, str, str], None] = {}  # a set in the layers' order
    opt = 0.0
    # Recomputation re-runs each layer's forward inside its backward.
    redo = 1.0 if plan.recompute else 0.0
    for dev in devices:
        costs = tp_rank_costs(compute, graph, dev, mb, tp)[lo : hi + 1]
        kind = dev.type.name
        for x, c in zip(layers, costs, strict=True):
            sources[(kind, x.name, c.source)] = None
        fwd = max(fwd, sum(c.fwd_s for c in costs))
        bwd = [max(b, c.bwd_s + redo * c.fwd_s) for b, c in zip(bwd, costs, strict=True)]
        opt = max(opt, optimizer_step_s(compute, graph, dev, layers, plan.optimizer, tp))
    if tp > 1:
        fwd_comm, bwd_comm = stage_tp_comm(graph, layers, mb, [d.id for d in devices], cluster)
        fwd += sum(fwd_comm)
        for k, (f, b) in enumerate(zip(fwd_comm, bwd_comm, strict=True)):
            bwd[k] += b + redo * f
    return fwd, bwd, opt, sources


def stage_tp_comm(
    graph: ModelGraph,
    layers: Sequence[LayerInfo],
    mb: int,
    devices: Sequence[str],
    cluster: Cluster,
) -> tuple[list[float], list[float]]:
    """Per layer of a stage, (forward s, backward s) of its TP all-reduces for one micro-batch
    of ``mb`` samples over the TP group ``devices`` (``cost.tp.tp_comm_times``)."""
    return tp_comm_times(layers, mb, graph.dtype, devices, cluster)


def _tp_bytes(plan: Plan, layers: Sequence[LayerInfo], dtype: str, mb: int) -> tuple[float, float]:
    """(forward, backward) bytes of a stage's TP all-reduces per rank and micro-batch."""
    traffic = [tp_traffic(layer, mb, dtype, plan.tp) for layer in layers]
    fwd = float(sum(sum(t.fwd) for t in traffic))
    bwd = float(sum(sum(t.bwd) for t in traffic))
    return fwd, bwd + (fwd if plan.recompute else 0.0)


def _cut(
    graph: ModelGraph, cluster: Cluster, a: Sequence[str], b: Sequence[str], last: int, mb: int
) -> CutWork:
    nbytes = float(graph.cut_bytes[last] * mb) if last < len(graph.cut_bytes) else 0.0
    # TP rank t sends the whole (replicated) values to rank t of the next stage.
    t = max(comm.p2p_time(nbytes, cluster.link(x, y)) for x, y in zip(a, b, strict=True))
    return CutWork(fwd_s=t, bwd_s=t, nbytes=nbytes)


def _grad_buckets(
    plan: Plan, graph: ModelGraph, ranges: list[tuple[int, int]]
) -> list[list[comm.GradBucket]]:
    """DDP's gradient buckets of each stage (the first pipeline's layer ranges)."""
    cap = plan.bucket_mb * MiB
    out = []
    for lo, hi in ranges:
        tensors = tp_grad_tensor_bytes(graph.layers[lo : hi + 1], graph.dtype, plan.tp)
        out.append(comm.ddp_buckets(tensors, cap, first_bucket(cap)))
    return out


def price(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    ranges: list[list[tuple[int, int]]],
) -> PricedWork:
    """Turn ``plan`` into priced work for the schedule generators."""
    spec = spec_of(plan)
    if spec.gathers_weights(plan) and spec.shape == "replicas":
        return fsdp_work(plan, graph, cluster, compute)
    sync = spec.syncs_replicas(plan)
    num = plan.num_stages
    keep_last = plan.recompute and plan.recompute_mode == "except_last"
    kept = replace(plan, recompute=False, recompute_mode="all") if keep_last else plan
    stage_buckets = _grad_buckets(plan, graph, ranges[0]) if sync else [[] for _ in range(num)]
    buckets = (
        [_sync_buckets(plan, cluster, s, stage_buckets[s]) for s in range(num)] if sync else []
    )
    pipes: list[PipelineWork] = []
    mbs: list[int] = []
    on_core: list[list[float]] = [[] for _ in range(num)]  # all-reduces sharing CPU cores
    sources: dict[tuple[str, str, str], None] = {}  # a set in the layers' order
    tp_bytes: list[list[tuple[float, float]]] = []
    for p, pipe in enumerate(plan.pipelines):
        mb = micro_batch_size(pipe.batch, plan.micro_batches)
        mbs.append(mb)
        stages: list[StageWork] = []
        cuts: list[CutWork] = []
        tp_bytes.append([])
        stage_devices = [stage.devices for stage in pipe.stages]
        for s, stage in enumerate(pipe.stages):
            lo, hi = ranges[p][s]
            tp_bytes[p].append(_tp_bytes(plan, graph.layers[lo : hi + 1], graph.dtype, mb))
            devs = [cluster.device(d) for d in stage.devices]
            fwd, bwd, opt, src = _stage_compute(
                plan, graph, cluster, compute, devs, ranges[p][s], mb
            )
            last = bwd
            if keep_last:  # the last micro-batch's backward: not recomputed (except_last)
                last = _stage_compute(kept, graph, cluster, compute, devs, ranges[p][s], mb)[1]
            opt += tie_sync_s(graph, cluster, ranges[p], stage_devices, s, plan.tp)
            sources |= src
            parts, _ = split_backward(last, stage_buckets[s]) if sync else ((), [])
            if keep_last and not sync:
                parts = (float(sum(last)),)
            if sync and not any(is_gpu(d.type) for d in devs):
                parts, opt, allreduce_s = _on_cores(parts, opt, devs, buckets[s])
                on_core[s] = _longest(on_core[s], allreduce_s)
            stages.append(
                StageWork(
                    devices=tuple(stage.devices),
                    fwd_s=fwd,
                    bwd_s=sum(bwd),
                    bwd_parts=parts,
                    opt_s=opt,
                    on_cores=all(d.type.is_cpu for d in devs),
                )
            )
            if s + 1 < num:
                nxt = pipe.stages[s + 1].devices
                cuts.append(_cut(graph, cluster, stage.devices, nxt, ranges[p][s][1], mb))
        pipes.append(PipelineWork(stages=tuple(stages), cuts=tuple(cuts), batch=pipe.batch))
    buckets = [_slowed(bs, on_core[s]) for s, bs in enumerate(buckets)]
    bucket_bytes = [float(sum(b.nbytes for b in bs)) for bs in stage_buckets]
    ps: list[PsWork] = []
    if spec.hosts_parameters:
        ps, pipes = _ps_work(plan, graph, cluster, pipes)
    if spec.gathers_weights(plan):  # pipelines of sharded stages
        pipes = sharded_stages(plan, graph, cluster, compute, ranges, pipes)
    if spec.shards_optimizer_only(plan):
        pipes = zero1_pipes(pipes, replica_devices(plan), graph, cluster)
    return PricedWork(
        pipes=pipes,
        buckets=buckets,
        ps=ps,
        micro_batch=mbs,
        bucket_bytes=bucket_bytes,
        sources=tuple(sorted({src for _, _, src in sources})),
        layer_sources=tuple(sources),
        tp_bytes=tp_bytes,
    )


def _on_cores(
    parts: tuple[float, ...], opt_s: float, devs: Sequence[Device], buckets: list[SyncBucket]
) -> tuple[tuple[float, ...], float, tuple[float, ...]]:
    """A CPU stage's last backward parts, optimizer seconds and bucket all-reduce times once
    the runtime's flattening and write-back (:mod:`hetplan.cost.bucket_cpu`) and the
    all-reduces (:mod:`hetplan.predict.cpu_overlap`) take their turns on its cores."""
    speed, sizes = min(d.speed for d in devs), [b.nbytes for b in buckets]
    shared = shared_core(flattened_parts(parts, sizes, speed), [b.duration_s for b in buckets])
    return shared.parts, opt_s + writeback_s(sizes, speed), shared.allreduce_s


def _longest(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [max(x, y) for x, y in zip_longest(a, b, fillvalue=0.0)]


def _slowed(buckets: list[SyncBucket], on_core: list[float]) -> list[SyncBucket]:
    """A stage's buckets, each as long as its slowest replica's all-reduce on a shared CPU
    core (:mod:`hetplan.predict.cpu_overlap`; a collective ends with its slowest rank)."""
    return [
        replace(b, duration_s=max(b.duration_s, on_core[k] if k < len(on_core) else 0.0))
        for k, b in enumerate(buckets)
    ]


def _sync_buckets(
    plan: Plan, cluster: Cluster, s: int, grads: list[comm.GradBucket]
) -> list[SyncBucket]:
    """Allreduce of each bucket across the replicas of stage ``s``, per TP rank (the ranks'
    allreduces run at the same time, sharing each node's network card:
    :mod:`hetplan.cost.contention`; the slowest counts)."""
    groups = [[p.stages[s].devices[t] for p in plan.pipelines] for t in range(plan.tp)]
    shared = concurrent_cluster(groups, cluster)
    out = []
    for k, g in enumerate(grads):  # split_backward makes bucket k ready after part k
        t = max(comm.allreduce_time(float(g.nbytes), grp, shared) for grp in groups)
        out.append(SyncBucket(part=k, duration_s=t, nbytes=float(g.nbytes)))
    return out


def _ps_work(
    plan: Plan, graph: ModelGraph, cluster: Cluster, pipes: list[PipelineWork]
) -> tuple[list[PsWork], list[PipelineWork]]:
    """Push/pull times per worker from the PS communication model; on CPU ranks plus the
    runtime's own work on their cores (:mod:`hetplan.cost.ps_cpu`): its buffers in the
    pushes and pulls, and (asynchronous) each host's server thread in its worker's optimizer
    slot, where it takes turns with that worker's compute."""
    tensors = [b for sizes in tp_grad_tensor_bytes(graph.layers, graph.dtype, 1) for b in sizes]
    workers = [p.stages[0].devices[0] for p in plan.pipelines]
    timing = comm.ps_sync_time(
        tensors, workers, plan.ps_devices, cluster, policy=plan.ps_assignment
    )
    total = float(sum(tensors))
    devices = [*workers, *plan.ps_devices]
    on_cpu = all(cluster.device(d).type.is_cpu for d in devices)
    if not on_cpu:
        cpu = PsCpuWork(push_s={}, pull_s={}, server_s={})
    else:
        hosts = host_bytes(plan.ps_devices, timing.shard_bytes)
        full_opt = {p.stages[0].devices[0]: p.stages[0].opt_s for p in pipes}
        any_opt = max(full_opt.values(), default=0.0)
        opt = {h: full_opt.get(h, any_opt) * b / total for h, b in hosts.items()} if total else {}
        speeds = {d: cluster.device(d).speed for d in devices}
        cpu = ps_cpu_work(
            hosts,
            workers,
            speeds,
            asynchronous=plan.ps_async,
            optimizer_s=opt,
            core_mates=_core_mates(cluster, devices),
        )
    if plan.ps_async:
        # Only a worker's push + pull total is known: split evenly between the two actions.
        ps = [
            PsWork(
                push_s=timing.async_per_worker_s[w] / 2 + cpu.push_s.get(w, 0.0),
                pull_s=timing.async_per_worker_s[w] / 2 + cpu.pull_s.get(w, 0.0),
                nbytes=total,
            )
            for w in workers
        ]
        if cpu.server_s:  # the server's steps replace the worker's (it steps nothing);
            # the application of its own push is already the wait in its pull; the rank's
            # messages take its cores too
            share = (len(workers) - 1) / len(workers)
            slot = {w: cpu.messages_s.get(w, 0.0) for w in workers}
            for h, t in cpu.server_s.items():
                slot[h] = slot.get(h, 0.0) + share * t
            pipes = [_with_opt(p, slot.get(p.stages[0].devices[0], 0.0)) for p in pipes]
        return ps, pipes
    pull = {w: max(timing.per_worker_s[w] - timing.push_s, 0.0) for w in workers}
    push = timing.push_s
    if on_cpu:  # gloo's reduce and broadcast, as the runtime calls them
        group = list(dict.fromkeys(devices))
        push, pulls = gloo_ps_phases(
            host_bytes(plan.ps_devices, timing.shard_bytes), group, cluster
        )
        pull = dict.fromkeys(workers, pulls)
    push += max(cpu.push_s.values(), default=0.0)
    ps = [
        PsWork(push_s=push, pull_s=pull[w] + cpu.pull_s.get(w, 0.0), nbytes=total) for w in workers
    ]
    return ps, pipes


def _core_mates(cluster: Cluster, devices: Sequence[str]) -> Callable[[str, str], bool]:
    """Whether two of ``devices`` are pinned to the same cores (:func:`core_groups`)."""
    group = {
        m: k for k, (members, _) in enumerate(core_groups(cluster, list(devices))) for m in members
    }
    return lambda a, b: a in group and group[a] == group.get(b)


def _with_opt(pipe: PipelineWork, opt_s: float) -> PipelineWork:
    """``pipe`` (one stage: a PS worker) with its optimizer slot set to ``opt_s``."""
    return replace(pipe, stages=(replace(pipe.stages[0], opt_s=opt_s), *pipe.stages[1:]))
