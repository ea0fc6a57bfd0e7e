"""Price ZeRO-1 (strategy ``fsdp`` with ``zero: 1``): data parallelism whose optimizer state
is sharded, as torch's ``ZeroRedundancyOptimizer`` runs it over hetplan's gradient
all-reduce (``run/setup/optimizers.py``).

Every replica computes and all-reduces as ``dp`` does (the same buckets); at the step each
rank updates only the tensors it owns (:func:`hetplan.cost.sharded.zero1_partition`: torch's
partition by elements, not by speed or memory) and then every owner broadcasts its tensors,
one flat bucket each, all issued at once (``parameters_as_bucket_view``). A rank's step is
therefore its owned share of the optimizer's work plus the broadcasts, and its memory a
replica's with the optimizer state of its own tensors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hetplan.cluster.spec import Cluster
from hetplan.cost.comm_collectives import ring_links, ring_phase_time_links
from hetplan.cost.memory import weight_scale
from hetplan.cost.sharded import Tensor, layer_tensors, zero1_partition
from hetplan.graph.types import ModelGraph
from hetplan.schedule.work import PipelineWork

# gloo's ZeRO-1 parameter sync (each of W ranks broadcasts its 1/W of a buffer, all issued
# then waited on) against its all-reduce of the whole buffer, CPU ranks pinned one per core:
# 0.39-0.63, median 0.49, over 2-4 ranks and 2.36-9.44 MB
# (``benchmarks/bench_gloo_shard_collectives.py``, 2026-11-28, docs/benchmarks.md).
# Dimensionless.
GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE = 0.5


def param_tensors(graph: ModelGraph) -> list[Tensor]:
    """The model's parameter tensors in layer order (the module's order for the zoo)."""
    return [t for layer in graph.layers for t in layer_tensors(layer)]


def owned_fractions(graph: ModelGraph, n: int) -> list[float]:
    """Per rank of ``n``, the fraction of the parameter bytes whose optimizer state it keeps
    and whose step it takes (all tensors of one dtype: elements and bytes agree)."""
    tensors = param_tensors(graph)
    whole = sum(t.nbytes for t in tensors)
    if whole <= 0:
        return [0.0] * n
    owned = zero1_partition([t.nbytes for t in tensors], n)
    return [sum(tensors[i].nbytes for i in mine) / whole for mine in owned]


def broadcasts_s(devices: Sequence[str], graph: ModelGraph, cluster: Cluster) -> float:
    """Seconds of the parameter sync after the step over the replicas ``devices`` (in plan
    order): every owner's tensors (the trained weights: fp32 under mixed precision), one
    broadcast per owner, each paying the cluster's per-collective overhead. On CPU ranks
    (gloo) :data:`GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE` of a ring all-reduce of the whole;
    on GPUs a pipelined broadcast per owner, its bytes once over the slowest ring edge and
    ``W - 1`` hops' latency (NCCL's ring broadcast)."""
    n = len(devices)
    if n <= 1:
        return 0.0
    links = ring_links(list(devices), cluster)
    w = weight_scale(graph.dtype)
    tensors = param_tensors(graph)
    calls = n * cluster.collective_overhead_s
    if all(cluster.device(d).type.is_cpu for d in devices):
        whole = w * sum(t.nbytes for t in tensors)
        return (
            ring_phase_time_links(2.0 * GLOO_ZERO1_BROADCASTS_VS_ALL_REDUCE * whole, links) + calls
        )
    owned = zero1_partition([t.nbytes for t in tensors], n)
    latency = max(link.latency_s for link in links)
    bandwidth = min(link.bandwidth for link in links)
    per_owner = [w * sum(tensors[i].nbytes for i in mine) for mine in owned]
    return sum((n - 1) * latency + b / bandwidth for b in per_owner if b > 0) + calls


def zero1_pipes(
    pipes: Sequence[PipelineWork], devices: Sequence[str], graph: ModelGraph, cluster: Cluster
) -> list[PipelineWork]:
    """``pipes`` (one single-stage replica each, priced as ``dp``) with each replica's
    optimizer step cut to its owned share and the broadcasts added."""
    shares = owned_fractions(graph, len(pipes))
    sync = broadcasts_s(devices, graph, cluster)
    out = []
    for pipe, share in zip(pipes, shares, strict=True):
        stage = pipe.stages[0]
        out.append(replace(pipe, stages=(replace(stage, opt_s=stage.opt_s * share + sync),)))
    return out
