"""The suite's links measured on the machine it runs on, as its compute is profiled there.

The example cluster files carry link figures measured on the development machine
(``hetplan profile-links``, 2026-11-22 and -29). The suite profiles every model on the machine
it runs on, but priced every collective with those files' figures: on another machine, or the
same machine on a slower day, its communication was priced from elsewhere. On 2026-11-30 the
2-core machine's all-reduce ran at 0.60-0.97 GB/s a ring step against the files' 0.77-1.48,
and re-predicting that day's quick suite with the measured files moved its median |error| from
28.5% to 26.4% (docs/benchmarks.md, "Session 44"). So before the first case, ``hetplan
bench`` measures each one-node cluster's pairs and all-reduce as ``profile-links`` does and
runs and prices every case on the measured copy, written beside the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hetplan.bench.suite import cluster_path
from hetplan.cluster import Cluster
from hetplan.cluster.config import load_cluster, load_cluster_config, write_cluster_config
from hetplan.profile.link_config import apply_report, benchmark_links
from hetplan.profile.links import LinkBenchSettings, LinkReport
from hetplan.run.launch.spawn import launch_local

CLUSTERS_DIR = "clusters"
"""Folder of the suite's output that holds the measured cluster files."""
LINK_SETTINGS = LinkBenchSettings()
"""``hetplan profile-links``' defaults (10 timed repetitions a size; with 20, the three local
clusters took 13, 26 and 17 s on the 2-core machine, 2026-11-30)."""
LINK_TIMEOUT_S = 300.0
"""Seconds: bound on one cluster's measurement (a rank that hangs fails the suite)."""

Measure = Callable[[Cluster], LinkReport]


def _measure(cluster: Cluster) -> LinkReport:
    return benchmark_links(cluster, LINK_SETTINGS, launch_local, timeout_s=LINK_TIMEOUT_S)


def measure_suite_links(
    names: tuple[str, ...],
    cluster_dir: Path | None,
    out: Path,
    measure: Measure = _measure,
) -> tuple[Path, list[str]]:
    """Each cluster of ``names`` with its links measured, written to ``out/clusters``; returns
    that folder and one line per cluster for the report. A cluster of several nodes (whose
    ranks cannot all start here) is copied as it is, and its line says so."""
    dest = out / CLUSTERS_DIR
    dest.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in names:
        source = cluster_path(name, cluster_dir)
        config, cluster = load_cluster_config(source), load_cluster(source)
        target = dest / source.name
        if len(cluster.nodes) > 1:
            write_cluster_config(target, config)
            lines.append(f"{cluster.name}: links as in {source} ({len(cluster.nodes)} nodes)")
            continue
        report = measure(cluster)
        write_cluster_config(target, apply_report(config, cluster, report))
        lines.append(f"{cluster.name}: {_summary(report)}, measured here ({target})")
    return dest, lines


def _summary(report: LinkReport) -> str:
    """The measured figures a reader compares with the cluster file's."""
    parts = []
    if report.pairs:
        bw = [p.bandwidth / 1e9 for p in report.pairs]
        lat = [p.latency_s * 1e6 for p in report.pairs]
        parts.append(f"pairs {min(bw):.2f}-{max(bw):.2f} GB/s, {min(lat):.0f}-{max(lat):.0f} us")
    ar = report.allreduce
    if ar is not None:
        step = ar.step_bandwidth if ar.step_bandwidth is not None else ar.bus_bandwidth
        if step is not None:
            parts.append(f"all-reduce {step / 1e9:.2f} GB/s a ring step")
        parts.append(f"{ar.fit.a_s * 1e6:.0f} us a call")
    return "; ".join(parts) or "no figure"
