"""gloo's reduce and broadcast, the collectives of the synchronous parameter server on CPU ranks.

:class:`hetplan.run.execute.ps.PsExecutor` pushes with one ``dist.reduce`` per host (the
shard's gradients summed at its host) and pulls with one ``dist.broadcast`` per host, every
call of a phase issued asynchronously and then waited. On CPU ranks these are gloo's:

- ``gloo::reduce`` (gloo/reduce.cc): a ring reduce-scatter of ``W`` chunks, each cut into
  two or more segments with two in flight (the second segment of a chunk one hop behind the
  first: ``W`` hops of ``S / (2W)`` bytes pipelined, counted here as ``W`` steps of
  ``S / W``), then every rank sends its reduced chunk to the root at once (one step; the
  root receives ``(W-1) S / W`` bytes).
- ``gloo::broadcast`` (gloo/broadcast.cc): a binomial tree, ``ceil(log2 W)`` steps each
  carrying the whole buffer.

Each step waits on the slowest edge of the ring (:func:`ring_links`), with its latency capped
at the cluster's measured collective step (``Cluster.collective_link``). Its bandwidth is the
pairs': the cap measured from an all-reduce's slope put one host's reduce and broadcast of 16
MiB at 86 ms on local-cpu-4on2, measured 33-36 ms, where the pairs give 35 ms
(``benchmarks/bench_gloo_ps_collectives.py --kb 256,4096,16384``, 2026-11-29). On CPU ranks
that share a core a ping-pong between core-mates waits a time slice (~1.8 ms on the 2-core
machine), which is not what these calls see: local-cpu-4on2's resnet-tiny PS measured 37-40
ms a step against 25.8 ms priced from the pairs by the TF-style model and 36.6 ms from this
one (docs/benchmarks.md, "gloo's collectives on shared cores").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hetplan.cluster.spec import Cluster
from hetplan.cost.comm_collectives import ring_links, slowest_link

# torch's ProcessGroupGloo runs a group's asynchronous collectives on its worker threads (2 by
# default), so the hosts' reduces (or broadcasts) of one phase overlap in part. Measured on the
# 2-core machine (4 ranks pinned two per core as local-cpu-4on2, gloo, torch 2.13, 2026-11-29,
# /tmp/s36/ps.py, medians of 20): four reduces + four broadcasts issued asynchronously took
# 1.09-1.66x less than the same calls one after another (4 KiB-4 MiB per host; 1.3 median).
# Dimensionless: a phase of several calls takes the sum of their times over this.
GLOO_ASYNC_OVERLAP = 1.3


def _slowest(devices: Sequence[str], cluster: Cluster) -> tuple[float, float]:
    """``(latency s, bandwidth B/s)`` of a step on the ring over ``devices``."""
    slow = slowest_link(ring_links(list(devices), cluster, capped_bandwidth=False))
    return slow.latency_s, slow.bandwidth


def gloo_reduce_time(nbytes: float, devices: Sequence[str], cluster: Cluster) -> float:
    """One ``gloo::reduce`` of ``nbytes`` over ``devices`` (module docstring); 0 for one
    device or no bytes."""
    world = len(devices)
    if world <= 1 or nbytes <= 0:
        return 0.0
    lat, bw = _slowest(devices, cluster)
    chunk = nbytes / world
    scatter = world * (lat + chunk / bw)
    gather = lat + (world - 1) * chunk / bw
    return scatter + gather + cluster.collective_overhead_s


def gloo_broadcast_time(nbytes: float, devices: Sequence[str], cluster: Cluster) -> float:
    """One ``gloo::broadcast`` of ``nbytes`` over ``devices`` (binomial tree)."""
    world = len(devices)
    if world <= 1 or nbytes <= 0:
        return 0.0
    lat, bw = _slowest(devices, cluster)
    return math.ceil(math.log2(world)) * (lat + nbytes / bw) + cluster.collective_overhead_s


def gloo_ps_phases(
    hosts: Mapping[str, float], devices: Sequence[str], cluster: Cluster
) -> tuple[float, float]:
    """``(push s, pull s)`` of the synchronous PS on gloo: one reduce per host (``hosts``:
    bytes each serves), then one broadcast per host, each phase's calls overlapping by
    :data:`GLOO_ASYNC_OVERLAP`."""
    sizes = [b for b in hosts.values() if b > 0]
    overlap = GLOO_ASYNC_OVERLAP if len(sizes) > 1 else 1.0
    push = sum(gloo_reduce_time(b, devices, cluster) for b in sizes) / overlap
    pull = sum(gloo_broadcast_time(b, devices, cluster) for b in sizes) / overlap
    return push, pull
