"""Run the link benchmark on a cluster's devices and write the figures into its cluster file.

Measured pairs become top-level ``pairs`` overrides (by device id) and the allreduce overhead
becomes ``collective_overhead_us`` (and, where the pairs overstate a collective's step,
``collective_step_latency_us`` and ``collective_step_bandwidth_GBps``): exactly what
:func:`hetplan.cluster.load_cluster` reads.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

from hetplan.cluster.config import ClusterConfig, LinkConfig, PairConfig
from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.profile.links import LinkBenchSettings, LinkReport, collect

ENTRY = "hetplan.profile.links:link_bench_rank"
SIGNIFICANT = 6  # digits kept in the written figures (measurements are not more precise)

Launcher = Callable[..., list[Any]]
"""``launch_local(entry, world_size, *, payload, cpus, timeout_s)`` of :mod:`hetplan.run`."""


def benchmark_links(
    cluster: Cluster,
    settings: LinkBenchSettings,
    launch: Launcher,
    *,
    timeout_s: float = 300.0,
) -> LinkReport:
    """One rank per device of ``cluster`` (pinned to its ``cpus``), all on this machine."""
    if len(cluster.nodes) > 1:
        raise InputError(
            f"cluster {cluster.name!r} has {len(cluster.nodes)} nodes; profile-links starts every "
            "rank on this machine, so give it a one-node cluster (measure each node separately)"
        )
    world = len(cluster.devices)
    if world < 2:
        raise InputError(f"cluster {cluster.name!r} has one device: no link to measure")
    payload = {
        "sizes": list(settings.sizes),
        "warmup": settings.warmup,
        "iters": settings.iters,
        "allreduce": settings.allreduce,
    }
    cpus = [d.cpus for d in cluster.devices]
    results = launch(ENTRY, world, payload=payload, cpus=cpus, timeout_s=timeout_s)
    return collect(results, settings)


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


def apply_report(config: ClusterConfig, cluster: Cluster, report: LinkReport) -> ClusterConfig:
    """A copy of ``config`` with measured pair links and collective overhead (rank r is
    ``cluster.devices[r]``); older overrides of the measured pairs are replaced."""
    ids = [d.id for d in cluster.devices]
    if report.world_size != len(ids):
        raise InputError(
            f"link report has {report.world_size} ranks, cluster {cluster.name!r} has {len(ids)}"
        )
    measured = {tuple(sorted((ids[a], ids[b]))) for a, b in (p.ranks for p in report.pairs)}
    out = copy.deepcopy(config)
    for node in out.nodes:
        node_ids = [d.id for d in cluster.devices if d.node == node.name]
        node.pairs = [
            p
            for p in node.pairs
            if tuple(sorted((node_ids[p.between[0]], node_ids[p.between[1]]))) not in measured
        ]
    kept = [p for p in out.pairs if tuple(sorted(p.between)) not in measured]
    new = [
        PairConfig(
            between=(ids[p.ranks[0]], ids[p.ranks[1]]),
            link=LinkConfig(
                bandwidth_GBps=_round(p.bandwidth / 1e9),
                latency_us=_round(p.latency_s * 1e6),
            ),
        )
        for p in report.pairs
    ]
    out.pairs = kept + new
    if report.allreduce is not None:
        step = report.allreduce.step_latency_s
        rate = report.allreduce.step_bandwidth
        out = dataclasses.replace(
            out,
            collective_overhead_us=_round(report.allreduce.overhead_s * 1e6),
            collective_step_latency_us=None if step is None else _round(step * 1e6),
            collective_step_bandwidth_GBps=None if rate is None else _round(rate / 1e9),
        )
    return out
