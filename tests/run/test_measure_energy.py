"""Energy of a measured run: metered where every device is covered, modelled otherwise
(hand-computed figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.profile.power_store import record_power_points
from hetplan.run.loop.job import RankResult
from hetplan.run.measurement.energy_check import gpu_power_points, with_energy
from hetplan.run.measurement.measure import summarize
from hetplan.run.tune import idle_watts

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-hetero.yaml"
GPUS = CLUSTER.with_name("homogeneous-4gpu.yaml")


def _raw(
    rank: int,
    device: str,
    kind: str,
    energy: list[float],
    source: str | None,
    limit_w: float | None = None,
) -> RankResult:
    """A rank's raw result; ``energy``: the meter's advance in each step (warm-up first),
    of which the timed window (steps 1..3, 1 s each plus 0.1 s between steps) is what the
    rank reports."""
    window = (sum(energy[1:]), 3.2, 3) if energy else None
    return RankResult(
        rank=rank, device=device, device_kind=kind, pipeline=rank, stage=0,
        step_s=[2.0, 1.0, 1.0, 1.0], forward_s=[0.3] * 4, backward_s=[0.4] * 4,
        optimizer_s=[0.1] * 4, loss=[1.0, 0.9, 0.8, 0.7], peak_memory_bytes=1,
        memory_source="tensor bytes", actions=[], energy_window=window,
        energy_source=source, power_limit_w=limit_w,
    )  # fmt: skip


def _plan(devices: list[str]) -> Plan:
    pipes = [PipelinePlan(stages=[StagePlan(layers=["0"], devices=[d])], batch=4) for d in devices]
    return Plan(
        model=ModelRef(name="m"), strategy="dp", global_batch=4 * len(devices), micro_batches=1,
        pipelines=pipes,
    )  # fmt: skip


def test_cpu_ranks_metered_once_per_node_by_rapl() -> None:
    raw = [
        _raw(0, "a", "cpu", [9.0, 5.0, 7.0, 6.0], "rapl"),  # local rank 0 reads the packages
        _raw(1, "b", "cpu", [], None),
    ]
    m = summarize(_plan(["a", "b"]), raw, warmup=1)
    assert m.energy_j_per_iteration == 6.0  # (5 + 7 + 6) / 3 timed steps
    assert m.energy_source == "measured (rapl)"


def test_gpu_ranks_each_metered_add_up() -> None:
    raw = [
        _raw(0, "a", "cuda:0", [0.0, 100.0, 110.0, 120.0], "nvml"),
        _raw(1, "b", "cuda:1", [0.0, 50.0, 40.0, 60.0], "nvml"),
    ]
    m = summarize(_plan(["a", "b"]), raw, warmup=1)
    assert m.energy_j_per_iteration == 160.0  # (330 + 150) / 3: each window's advance per step


def test_a_gap_in_the_meters_falls_back_to_the_model() -> None:
    cluster = load_cluster(CLUSTER)
    a, b = (d.id for d in cluster.devices[:2])
    raw = [
        _raw(0, a, "cuda:0", [0.0, 100.0, 110.0, 120.0], "nvml"),
        _raw(1, b, "cpu", [], None),  # a CPU rank beside a GPU one, no RAPL: not covered
    ]
    m = summarize(_plan([a, b]), raw, warmup=1)
    assert m.energy_j_per_iteration is None
    m = with_energy(m, cluster)
    # Each rank busy 0.3 + 0.4 + 0.1 = 0.8 s of the 1 s iteration: P = idle + 0.8 (max - idle).
    expected = sum(
        (t.idle_power_w + 0.8 * (t.max_power_w - t.idle_power_w)) * 1.0
        for t in (cluster.device(a).type, cluster.device(b).type)
    )
    assert m.energy_j_per_iteration == pytest.approx(expected)
    assert m.energy_source.startswith("modelled")


def test_a_rapl_reading_already_holds_the_unused_cpus_of_its_node() -> None:
    cluster = load_cluster(CLUSTER)
    a, b, c = (d.id for d in cluster.devices)
    plan = _plan([a, b])
    raw = [_raw(0, a, "cpu", [9.0, 5.0, 7.0, 6.0], "rapl"), _raw(1, b, "cpu", [], None)]
    m = summarize(plan, raw, warmup=1)
    assert idle_watts(plan, cluster) == cluster.device(c).type.idle_power_w  # modelled idle
    assert idle_watts(plan, cluster, m) == 0.0  # inside the package reading
    unmetered = summarize(
        plan, [_raw(0, a, "cpu", [], None), _raw(1, b, "cpu", [], None)], warmup=1
    )
    assert idle_watts(plan, cluster, unmetered) == cluster.device(c).type.idle_power_w


def test_a_window_above_the_power_limit_is_rejected_with_its_figures() -> None:
    cluster = load_cluster(GPUS)
    a = cluster.devices[0].id
    # 3 timed steps of 1 J... 2400 J over 3.2 s: 750 W against a 700 W enforced limit (+5%
    # allowed: 735 W) -> rejected; 2240 J: 700 W -> kept
    bad = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 800.0, 800.0, 800.0], "nvml",
                                      700.0)], warmup=1)  # fmt: skip
    assert bad.ranks[0].power_w == pytest.approx(750.0)
    bad = with_energy(bad, cluster)
    assert bad.energy_invalid is not None
    assert "2400.0 J over 3.200 s implies 750 W" in bad.energy_invalid
    assert "700 W" in bad.energy_invalid
    assert bad.energy_source.startswith("modelled")
    assert gpu_power_points(bad, cluster) == {}  # kept out of the fit
    good = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 700.0, 770.0, 770.0], "nvml",
                                       700.0)], warmup=1)  # fmt: skip
    good = with_energy(good, cluster)
    assert good.energy_invalid is None
    assert good.energy_j_per_iteration == pytest.approx(2240.0 / 3)
    kind = cluster.device(a).type.name
    # busy (0.3 + 0.4 + 0.1) / 1.0 s step; 2240 J / 3.2 s = 700 W
    assert gpu_power_points(good, cluster) == {kind: [pytest.approx((0.8, 700.0))]}


def test_without_nvml_s_limit_the_catalog_maximum_bounds_the_power() -> None:
    cluster = load_cluster(GPUS)
    a = cluster.devices[0].id
    cap = cluster.device(a).type.max_power_w
    over = 1.2 * cap * 3.2  # joules over the 3.2 s window: 20% above the catalog maximum
    m = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, over, 0.0, 0.0], "nvml")], warmup=1)
    assert with_energy(m, cluster).energy_invalid is not None


def test_a_window_below_the_measured_rest_power_is_rejected(tmp_path: Path) -> None:
    cluster = load_cluster(GPUS)
    a = cluster.devices[0].id
    kind = cluster.device(a).type.name
    record_power_points(kind, [(0.0, 72.5), (1.0, 300.0)], tmp_path)  # profile-power's points
    # 160 J over 3.2 s = 50 W, below the 72.5 W measured at rest
    m = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 60.0, 50.0, 50.0], "nvml", 700.0)],
                  warmup=1)  # fmt: skip
    m = with_energy(m, cluster, tmp_path)
    assert m.energy_invalid is not None and "below the device's measured rest power 72 W" in (
        m.energy_invalid
    )


def test_without_a_measured_rest_power_half_the_catalog_idle_is_the_floor() -> None:
    cluster = load_cluster(GPUS)  # A100-40GB: catalog idle 72 W, floor 36 W
    a = cluster.devices[0].id
    # 96 J over 3.2 s = 30 W: below 36 W, a window that missed its energy -> rejected
    low = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 32.0, 32.0, 32.0], "nvml", 400.0)],
                    warmup=1)  # fmt: skip
    low = with_energy(low, cluster)
    assert low.energy_invalid == (
        "rank 0 (n0.0, nvml): 96.0 J over 3.200 s implies 30 W, below 50% of the catalog's "
        "idle power 36 W"
    )
    assert gpu_power_points(low, cluster) == {}
    # 192 J over 3.2 s = 60 W: under the catalog's 72 W idle, above half of it -> kept
    ok = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 64.0, 64.0, 64.0], "nvml", 400.0)],
                   warmup=1)  # fmt: skip
    assert with_energy(ok, cluster).energy_invalid is None


def test_a_rejected_reading_reaches_the_report_and_not_the_fit(tmp_path: Path) -> None:
    from hetplan.cli.output import console
    from hetplan.cli.train_view import print_report, report_json
    from hetplan.profile.power_store import load_points
    from hetplan.usecases.train import record_power

    cluster = load_cluster(GPUS)
    a = cluster.devices[0].id
    m = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 800.0, 800.0, 800.0], "nvml", 700.0)],
                  warmup=1)  # fmt: skip
    m = with_energy(m, cluster, tmp_path)
    assert record_power(m, cluster, tmp_path) == []
    assert load_points(cluster.device(a).type.name, tmp_path) == []
    data = report_json(m, tmp_path / "m.json", None, 0.0)
    assert data["energy_invalid"] == m.energy_invalid and "750 W" in m.energy_invalid
    assert data["energy_source"].startswith("modelled")
    with console.capture() as shown:
        print_report(m, tmp_path / "m.json", None)
    assert "metered energy rejected: rank 0" in shown.get()


def test_a_type_s_limit_is_its_own_ranks_nvml_limit_else_the_catalog_s() -> None:
    from hetplan.run.measurement.energy_check import type_limit_w

    cluster = load_cluster(GPUS)
    a, b = (d.id for d in cluster.devices[:2])
    raw = [_raw(0, a, "cuda:0", [0.0, 1.0, 1.0, 1.0], "nvml", 300.0),
           _raw(1, b, "cuda:1", [0.0, 1.0, 1.0, 1.0], "nvml", 250.0)]  # fmt: skip
    kind = cluster.device(a).type.name
    assert type_limit_w(summarize(_plan([a, b]), raw, warmup=1), cluster, kind) == 250.0
    raw = [_raw(0, a, "cuda:0", [0.0, 1.0, 1.0, 1.0], "nvml")]
    assert type_limit_w(summarize(_plan([a]), raw, warmup=1), cluster, kind) == 400.0


def test_a_stored_fit_does_not_lower_the_catalog_limit(tmp_path: Path) -> None:
    from hetplan.profile.power_store import with_power_fits

    record_power_points("A100-40GB", [(0.0, 60.0), (1.0, 300.0)], tmp_path)
    cluster, used = with_power_fits(load_cluster(GPUS), tmp_path)
    a = cluster.devices[0].id
    assert used == ["A100-40GB"] and cluster.device(a).type.max_power_w == pytest.approx(300.0)
    # 1120 J over 3.2 s = 350 W: above the fitted 300 W, within the catalog's 400 W -> kept
    m = summarize(_plan([a]), [_raw(0, a, "cuda:0", [0.0, 400.0, 360.0, 360.0], "nvml")],
                  warmup=1)  # fmt: skip
    assert with_energy(m, cluster, tmp_path).energy_invalid is None
