"""The suite's links measured before its cases: the measured copies it runs and prices on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hetplan.bench.links import CLUSTERS_DIR, measure_suite_links
from hetplan.cluster import Cluster, load_cluster
from hetplan.cluster.config import load_cluster_config
from hetplan.profile.fit import LinearFit, Stats
from hetplan.profile.links import AllreduceResult, LinkReport, PairResult

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"


def fake_report(cluster: Cluster) -> LinkReport:
    """A measurement of a two-rank cluster: the pair at 2 GB/s and 100 us; the all-reduce's
    slope at 0.5 GB/s a ring step, slower than the pair (so a step bandwidth is written)."""
    assert len(cluster.devices) == 2
    one = Stats(median_s=1e-4, p10_s=1e-4, p90_s=1e-4)
    pair = PairResult(ranks=(0, 1), sizes=(1024,), one_way=(one,), latency_s=1e-4, bandwidth=2e9)
    ar = AllreduceResult(
        world_size=2, sizes=(1024,), times=(one,), fit=LinearFit(a_s=2.5e-3, k_s=2e-9),
        bus_bandwidth=0.5e9, ring_latency_s=2e-4, overhead_s=2.3e-3, step_bandwidth=0.5e9,
    )  # fmt: skip
    return LinkReport(backend="gloo", world_size=2, statistic="median", pairs=(pair,), allreduce=ar)


def test_each_cluster_is_priced_on_a_copy_with_its_measured_links(tmp_path: Path) -> None:
    dest, lines = measure_suite_links(("local-cpu",), EXAMPLES, tmp_path, measure=fake_report)
    assert dest == tmp_path / CLUSTERS_DIR
    written = load_cluster_config(dest / "local-cpu.yaml")
    (pair,) = written.pairs
    assert sorted(pair.between) == ["local.0", "local.1"]
    assert pair.link.bandwidth_GBps == pytest.approx(2.0)
    assert pair.link.latency_us == pytest.approx(100.0)
    assert written.collective_step_bandwidth_GBps == pytest.approx(0.5)
    # The rest of the file is the example's: same devices, pinned to the same cores.
    mine, theirs = load_cluster(dest / "local-cpu.yaml"), load_cluster(EXAMPLES / "local-cpu.yaml")
    assert [(d.id, d.cpus) for d in mine.devices] == [(d.id, d.cpus) for d in theirs.devices]
    assert lines == [
        f"local-cpu: pairs 2.00-2.00 GB/s, 100-100 us; all-reduce 0.50 GB/s a ring step; "
        f"2500 us a call, measured here ({dest / 'local-cpu.yaml'})"
    ]


def test_a_cluster_of_several_nodes_keeps_its_files_links(tmp_path: Path) -> None:
    clusters = tmp_path / "in"
    clusters.mkdir()
    shutil.copy(EXAMPLES / "loopback-2node.yaml", clusters)

    def never(cluster: Cluster) -> LinkReport:
        raise AssertionError(f"{cluster.name}: its ranks cannot all start here")

    dest, lines = measure_suite_links(("loopback-2node",), clusters, tmp_path, measure=never)
    assert load_cluster_config(dest / "loopback-2node.yaml") == load_cluster_config(
        clusters / "loopback-2node.yaml"
    )
    assert len(lines) == 1 and "links as in" in lines[0] and "2 nodes" in lines[0]
