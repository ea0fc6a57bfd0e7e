"""Measured power points, their fit, and its use by the cost model (hand-computed figures)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.run.measure import Measurement, RankFigures
from hetplan.run.power_profile import (
    load_points,
    measure_power_points,
    record_power_points,
    with_power_fits,
)
from hetplan.run.train import gpu_power_points

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-hetero.yaml"
IDLE_W = 10.0  # the fake counter's watts at rest
CPU_W = 40.0  # and its extra watts per busy core


class CpuTimeMeter:
    """A counter that behaves like a power meter: IDLE_W always, plus CPU_W per second of this
    process's CPU time (a busy loop raises it, sleeping does not)."""

    name = "fake"
    scope = "this process"

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def read_j(self) -> float:
        return IDLE_W * (time.perf_counter() - self.t0) + CPU_W * (time.process_time() - self.c0)


def test_measured_points_separate_rest_from_load() -> None:
    torch.set_num_threads(1)  # one busy core: CPU_W extra under load
    points = measure_power_points("cpu", 1.0, meter=CpuTimeMeter())
    (u0, rest), (u1, busy) = points
    assert (u0, u1) == (0.0, 1.0)
    assert rest == pytest.approx(IDLE_W, abs=3.0)
    assert busy == pytest.approx(IDLE_W + CPU_W, rel=0.25)


def test_no_counter_is_an_input_error_with_the_reason() -> None:
    with pytest.raises(InputError, match="no energy counter"):
        measure_power_points("tpu:0", 1.0)
    with pytest.raises(InputError, match="--seconds"):
        measure_power_points("cpu", 0.1, meter=CpuTimeMeter())


def test_points_accumulate_and_refit(tmp_path: Path) -> None:
    assert record_power_points("cpu", [(0.5, 60.0)], tmp_path) is None  # one load: no slope
    fit = record_power_points("cpu", [(1.0, 100.0)], tmp_path)
    assert fit is not None  # line through (0.5, 60) and (1, 100): slope 80, intercept 20
    assert fit.idle_w == pytest.approx(20.0)
    assert fit.max_w == pytest.approx(100.0)
    assert load_points("cpu", tmp_path) == [(0.5, 60.0), (1.0, 100.0)]


def test_fits_replace_the_catalog_figures_of_their_type_only(tmp_path: Path) -> None:
    cluster = load_cluster(CLUSTER)
    same, used = with_power_fits(cluster, tmp_path)
    assert used == [] and same is cluster
    kind = cluster.devices[0].type.name
    record_power_points(kind, [(0.0, 7.0), (1.0, 31.0)], tmp_path)
    fitted, used = with_power_fits(cluster, tmp_path)
    assert used == [kind]
    for before, after in zip(cluster.devices, fitted.devices, strict=True):
        if before.type.name == kind:
            assert (after.type.idle_power_w, after.type.max_power_w) == pytest.approx((7, 31))
        else:
            assert after.type == before.type


def _rank(device: str, source: str | None, energy: float | None) -> RankFigures:
    return RankFigures(
        rank=0, device=device, pipeline=0, stage=0, step_s=0.5, forward_s=0.1, backward_s=0.2,
        optimizer_s=0.05, wait_s=0.15, peak_memory_bytes=0, memory_source="x",
        energy_j=energy, energy_source=source,
    )  # fmt: skip


def test_gpu_points_from_a_run_use_metered_gpu_ranks_only() -> None:
    cluster = load_cluster(CLUSTER)
    ids = [d.id for d in cluster.devices]
    m = Measurement(
        plan=None,  # type: ignore[arg-type]
        cluster=None, steps=1, warmup=0, measured_iteration_s=0.5, iteration_p10_s=0.5,
        iteration_p90_s=0.5, iteration_s=[0.5], loss=[1.0],
        ranks=[
            _rank(ids[0], "nvml", 100.0), _rank(ids[1], "rapl", 80.0), _rank(ids[2], None, None)
        ],
    )  # fmt: skip
    points = gpu_power_points(m, cluster)
    kind = cluster.device(ids[0]).type.name
    # busy (0.1 + 0.2 + 0.05) / 0.5 = 0.7; 100 J over 0.5 s = 200 W
    assert points == {kind: [pytest.approx((0.7, 200.0))]}
