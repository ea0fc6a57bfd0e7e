"""Link benchmark: fits on synthetic samples, the cluster-file update, and a real 2-rank run."""

from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster.config import config_from_data, load_cluster, write_cluster_config
from hetplan.cluster.resolve import resolve_config
from hetplan.errors import InputError
from hetplan.profile import links
from hetplan.profile.link_config import apply_report, benchmark_links
from hetplan.profile.links import (
    LinkBenchSettings,
    LinkReport,
    allreduce_result,
    collect,
    fit_link,
    padded,
    pair_result,
    ring_latency,
)
from hetplan.run.launch.spawn import launch_local

SIZES = [1024, 65536, 1048576]


def line(latency: float, bandwidth: float) -> list[float]:
    return [latency + s / bandwidth for s in SIZES]


def test_fit_link_recovers_latency_and_bandwidth() -> None:
    latency, bandwidth = fit_link(SIZES, line(50e-6, 2e9))
    assert latency == pytest.approx(50e-6)
    assert bandwidth == pytest.approx(2e9)


def test_flat_times_give_bandwidth_from_the_largest_message() -> None:
    latency, bandwidth = fit_link(SIZES, [1e-3, 1e-3, 1e-3])
    assert latency == pytest.approx(1e-3)
    assert bandwidth == pytest.approx(1048576 / 1e-3)


def test_pair_result_uses_the_chosen_statistic() -> None:
    # per size: 9 repetitions on the line plus one slow outlier; medians stay on the line
    samples = [[t] * 9 + [10 * t] for t in line(20e-6, 1e9)]
    med = pair_result((0, 1), SIZES, samples)
    assert med.latency_s == pytest.approx(20e-6)
    assert med.bandwidth == pytest.approx(1e9)
    low = pair_result((0, 1), SIZES, [[t, 2 * t] * 5 for t in line(20e-6, 1e9)], "p10")
    assert low.latency_s == pytest.approx(20e-6)
    assert low.one_way[0].median_s == pytest.approx(1.5 * line(20e-6, 1e9)[0])


def test_allreduce_overhead_is_intercept_minus_ring_latency() -> None:
    # 3 ranks, ring edges (0,1), (1,2), (0,2); slowest latency 30 us -> 2 * 2 * 30 = 120 us
    pairs = [
        pair_result((0, 1), SIZES, [[t] for t in line(10e-6, 1e9)]),
        pair_result((1, 2), SIZES, [[t] for t in line(30e-6, 1e9)]),
        pair_result((0, 2), SIZES, [[t] for t in line(20e-6, 1e9)]),
    ]
    assert ring_latency(3, pairs) == pytest.approx(120e-6)
    # allreduce: 200 us + S * (4/3) / 1e9  ->  overhead 80 us, bus bandwidth 1e9
    times = [[200e-6 + s * (4 / 3) / 1e9] for s in SIZES]
    ar = allreduce_result(3, SIZES, times, pairs)
    assert ar.fit.a_s == pytest.approx(200e-6)
    assert ar.overhead_s == pytest.approx(80e-6)
    assert ar.bus_bandwidth == pytest.approx(1e9)
    assert ar.step_latency_s is None  # the pairs do not overstate a step here
    # an intercept below the ring latency gives no negative overhead, but a step latency:
    # 50 us over the ring's 2 (W-1) = 4 steps
    low = allreduce_result(3, SIZES, [[50e-6 + s / 1e9] for s in SIZES], pairs)
    assert low.overhead_s == 0
    assert low.step_latency_s == pytest.approx(12.5e-6)
    assert ar.step_bandwidth is None and low.step_bandwidth is None  # bus >= the pairs' 1 GB/s
    # a slope twice the ring's (bus bandwidth 0.5 GB/s, the pairs 1 GB/s): the step's bandwidth
    slow = allreduce_result(3, SIZES, [[200e-6 + s * (4 / 3) / 0.5e9] for s in SIZES], pairs)
    assert slow.bus_bandwidth == pytest.approx(0.5e9)
    assert slow.step_bandwidth == pytest.approx(0.5e9)


def test_link_fits_follow_every_size_not_the_largest_alone() -> None:
    # 1 KiB to 32 MiB, latency 25 us, 4 GB/s, the largest message read 3% slow or fast: an
    # absolute least-squares fit spends its intercept on that one point (17 or 33 us); relative
    # to each time it keeps the small sizes' latency.
    sizes = [1024, 16384, 262144, 4194304, 33554432]
    for factor in (1.03, 0.97):
        times = [25e-6 + s / 4e9 for s in sizes]
        times[-1] *= factor
        latency, bandwidth = fit_link(sizes, times)
        assert latency == pytest.approx(25e-6, rel=0.01)
        assert bandwidth == pytest.approx(4e9, rel=0.03)


def rank_output(rank: int, pairs: dict[str, Any], allreduce: dict[str, list[float]]) -> dict:
    return {"rank": rank, "backend": "gloo", "p2p": pairs, "allreduce": allreduce}


def test_collect_takes_the_slowest_rank_per_repetition() -> None:
    settings = LinkBenchSettings(sizes=(1000, 3000), iters=2, warmup=0)
    sizes = [padded(s) for s in settings.sizes]
    assert sizes == [1000, 3000]
    p2p = {"0-1": {str(s): [1e-5 + s / 1e9] * 2 for s in sizes}}
    results = [
        rank_output(0, p2p, {"1000": [1.0, 4.0], "3000": [2.0, 2.0]}),
        rank_output(1, {}, {"1000": [3.0, 2.0], "3000": [1.0, 5.0]}),
    ]
    report = collect(results, settings)
    assert report.world_size == 2 and report.backend == "gloo"
    assert report.pairs[0].latency_s == pytest.approx(1e-5)
    assert report.allreduce is not None
    # slowest per repetition: size 1000 -> [3, 4] (median 3.5); 3000 -> [2, 5] (median 3.5)
    assert [t.median_s for t in report.allreduce.times] == [3.5, 3.5]


CLUSTER = {
    "name": "t",
    "nodes": [
        {
            "name": "local",
            "devices": [{"type": "cpu", "count": 3}],
            "link": {"type": "shm"},
            "pairs": [{"between": [0, 1], "link": {"bandwidth_GBps": 9, "latency_us": 9}}],
        }
    ],
    "pairs": [{"between": ["local.2", "local.1"], "link": {"type": "shm"}}],
}


def test_apply_report_writes_pairs_and_overhead_the_planner_reads(tmp_path: Path) -> None:
    config = config_from_data(CLUSTER, "t")
    cluster = resolve_config(config, "t")
    pairs = [
        pair_result((0, 1), SIZES, [[t] for t in line(10e-6, 2e9)]),
        pair_result((0, 2), SIZES, [[t] for t in line(20e-6, 1e9)]),
        pair_result((1, 2), SIZES, [[t] for t in line(30e-6, 3e9)]),
    ]
    ar = allreduce_result(3, SIZES, [[500e-6 + s / 1e9] for s in SIZES], pairs)
    report = LinkReport(
        backend="gloo", world_size=3, statistic="median", pairs=tuple(pairs), allreduce=ar
    )
    updated = apply_report(config, cluster, report)
    assert config.pairs[0].link.type == "shm"  # the input is not modified
    assert updated.nodes[0].pairs == []  # the old override of a measured pair is gone
    path = tmp_path / "measured.yaml"
    write_cluster_config(path, updated)
    back = load_cluster(path)
    for a, b, lat, bw in (("local.0", "local.1", 10e-6, 2e9), ("local.2", "local.1", 30e-6, 3e9)):
        link = back.link(a, b)
        assert link.latency_s == pytest.approx(lat, rel=1e-5)
        assert link.bandwidth == pytest.approx(bw, rel=1e-5)
    assert back.collective_overhead_s == pytest.approx(ar.overhead_s, rel=1e-5)
    assert ar.overhead_s == pytest.approx(500e-6 - 2 * 2 * 30e-6)
    assert back.collective_step_s is None
    # an all-reduce faster than the pairs' ring (60 us < 4 x 30 us): its step is written
    fast = allreduce_result(3, SIZES, [[60e-6 + s / 1e9] for s in SIZES], pairs)
    measured = LinkReport(
        backend="gloo", world_size=3, statistic="median", pairs=tuple(pairs), allreduce=fast
    )
    write_cluster_config(path, apply_report(config, cluster, measured))
    again = load_cluster(path)
    assert again.collective_step_s == pytest.approx(15e-6, rel=1e-5)
    assert again.collective_overhead_s == 0
    assert again.collective_bandwidth is None  # bus 1.33 GB/s >= the slowest pair's 1 GB/s
    # an all-reduce slower than the pairs' ring (bus 0.25 GB/s): its step's bandwidth too
    slow = allreduce_result(3, SIZES, [[60e-6 + s * (4 / 3) / 0.25e9] for s in SIZES], pairs)
    write_cluster_config(
        path,
        apply_report(
            config,
            cluster,
            LinkReport(
                backend="gloo", world_size=3, statistic="median", pairs=tuple(pairs), allreduce=slow
            ),
        ),
    )
    assert load_cluster(path).collective_bandwidth == pytest.approx(0.25e9, rel=1e-5)
    with pytest.raises(InputError, match="2 ranks"):
        apply_report(
            config,
            cluster,
            LinkReport(backend="gloo", world_size=2, statistic="median", pairs=(), allreduce=None),
        )


def test_benchmark_rejects_clusters_it_cannot_run(tmp_path: Path) -> None:
    one = resolve_config(
        config_from_data(
            {"name": "o", "nodes": [{"name": "a", "devices": [{"type": "cpu"}]}]}, "o"
        ),
        "o",
    )
    with pytest.raises(InputError, match="one device"):
        benchmark_links(one, LinkBenchSettings(), launch_local)
    two_nodes = {
        "name": "n",
        "nodes": [
            {"name": "a", "devices": [{"type": "cpu"}]},
            {"name": "b", "devices": [{"type": "cpu"}]},
        ],
        "network": {"type": "10GbE"},
    }
    with pytest.raises(InputError, match="2 nodes"):
        benchmark_links(
            resolve_config(config_from_data(two_nodes, "n"), "n"), LinkBenchSettings(), launch_local
        )


@pytest.mark.slow  # starts 2 processes
def test_real_two_rank_gloo_benchmark() -> None:
    cluster = resolve_config(
        config_from_data(
            {
                "name": "two",
                "nodes": [
                    {"name": "l", "devices": [{"type": "cpu", "count": 2}], "link": {"type": "shm"}}
                ],
            },
            "two",
        ),
        "two",
    )
    settings = LinkBenchSettings(sizes=(256, 4096, 65536), warmup=1, iters=3)
    report = benchmark_links(cluster, settings, launch_local, timeout_s=120)
    assert report.backend == "gloo" and report.world_size == 2
    assert [p.ranks for p in report.pairs] == [(0, 1)]
    pair = report.pairs[0]
    assert pair.sizes == (256, 4096, 65536)
    assert all(0 < s.p10_s <= s.median_s <= s.p90_s for s in pair.one_way)
    assert pair.latency_s >= 0 and pair.bandwidth > 0
    assert report.allreduce is not None and len(report.allreduce.times) == 3
    assert report.allreduce.overhead_s >= 0


class _FakeRank:
    """``torch.distributed`` for rank 0 of 2 on a fake clock: an all-reduce takes 1 ms, every
    other call nothing."""

    def __init__(self) -> None:
        self.now = 0.0
        self.all_reduces = 0

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def all_reduce(self, _buf: Any) -> None:
        self.all_reduces += 1
        self.now += 1e-3

    def barrier(self) -> None:
        self.now += 5e-3  # the skew leaving a barrier: never inside a sample

    def send(self, _buf: Any, _peer: int) -> None:
        return None

    def recv(self, _buf: Any, _peer: int) -> None:
        return None


def test_allreduce_samples_are_calls_back_to_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sample times BACK_TO_BACK all-reduces issued one after another (a barrier only
    before the first) and records the time per call."""
    fake = _FakeRank()
    monkeypatch.setattr(links, "dist", fake)
    monkeypatch.setattr(links.time, "perf_counter", lambda: fake.now)
    payload = {"sizes": [1024, 4096], "warmup": 1, "iters": 3, "allreduce": True}
    out = links.link_bench_rank(type("Ctx", (), {"device": "cpu", "backend": "gloo"})(), payload)
    assert fake.all_reduces == 2 * (1 + 3) * links.BACK_TO_BACK
    for samples in out["allreduce"].values():
        assert samples == pytest.approx([1e-3] * 3)
