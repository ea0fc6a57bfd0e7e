"""Measuring power at rest and under load (``profile-power``), and a run's GPU points for the
fit (the points' store and fit: ``tests/profile/test_power_store.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.profile.power_store import load_points
from hetplan.run.measurement.energy_check import gpu_power_points
from hetplan.run.measurement.measure import Measurement, RankFigures
from hetplan.run.meters.power_profile import measure_power_points

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-hetero.yaml"
IDLE_W = 10.0  # the fake counter's watts at rest
LOAD_W = 40.0  # and its extra watts while the load runs


class FakeDevice:
    """A device and its energy counter: IDLE_W always, plus LOAD_W for every second spent in
    ``work`` (independent of how busy the test machine is)."""

    name = "fake"
    scope = "a fake device"

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.busy_s = 0.0

    def read_j(self) -> float:
        return IDLE_W * (time.perf_counter() - self.t0) + LOAD_W * self.busy_s

    def work(self) -> None:
        start = time.perf_counter()
        time.sleep(0.01)
        self.busy_s += time.perf_counter() - start


def test_measured_points_separate_rest_from_load() -> None:
    dev = FakeDevice()
    points, limit = measure_power_points("cpu", 1.0, meter=dev, load=dev.work)
    assert limit is None  # the fake has no enforced limit
    (u0, rest), (u1, busy) = points
    assert (u0, u1) == (0.0, 1.0)
    assert rest == pytest.approx(IDLE_W, rel=1e-3)  # two clock reads apart
    # The loop spends nearly all its time in work(): between 90% and 100% of LOAD_W on top.
    assert IDLE_W + 0.9 * LOAD_W <= busy <= (IDLE_W + LOAD_W) * 1.001


def test_no_counter_is_an_input_error_with_the_reason() -> None:
    with pytest.raises(InputError, match="no energy counter"):
        measure_power_points("tpu:0", 1.0)
    with pytest.raises(InputError, match="--seconds"):
        measure_power_points("cpu", 0.1, meter=FakeDevice())


def _rank(device: str, source: str | None, energy: float | None) -> RankFigures:
    """``energy`` joules per 0.5 s step over a window of 10 steps (5.0 s)."""
    return RankFigures(
        rank=0, device=device, pipeline=0, stage=0, step_s=0.5, forward_s=0.1, backward_s=0.2,
        optimizer_s=0.05, wait_s=0.15, peak_memory_bytes=0, memory_source="x",
        energy_j=energy, energy_source=source, energy_window_s=None if energy is None else 5.0,
        power_w=None if energy is None else energy / 0.5,
    )  # fmt: skip


def test_gpu_points_from_a_run_use_metered_gpu_ranks_only() -> None:
    cluster = load_cluster(CLUSTER)
    ids = [d.id for d in cluster.devices]
    m = Measurement(
        plan=None,  # type: ignore[arg-type]
        cluster=None, steps=1, warmup=0, measured_iteration_s=0.5, iteration_p10_s=0.5,
        iteration_p90_s=0.5, iteration_s=[0.5], loss=[1.0],
        ranks=[
            _rank(ids[0], "nvml", 4.0), _rank(ids[1], "rapl", 3.0), _rank(ids[2], None, None)
        ],
    )  # fmt: skip
    points = gpu_power_points(m, cluster)
    kind = cluster.device(ids[0]).type.name
    # busy (0.1 + 0.2 + 0.05) / 0.5 = 0.7; 4 J per 0.5 s step = 8 W (the cpu type's catalog
    # maximum is 8.75 W: a plausible reading)
    assert points == {kind: [pytest.approx((0.7, 8.0))]}


class _FakeGpu(FakeDevice):
    """A fake GPU behind NVML: the fake counter and a 700 W enforced limit."""

    name = "nvml"

    def power_limit_w(self) -> float:
        return 700.0


def _as_gpu(monkeypatch: pytest.MonkeyPatch, gpu_name: str) -> _FakeGpu:
    """``cuda:0`` is a GPU called ``gpu_name`` with a fake meter and a fake load."""
    import torch

    from hetplan.profile import model
    from hetplan.run.meters import power_profile

    dev = _FakeGpu()
    monkeypatch.setattr(model, "torch_device", lambda spec: torch.device("cuda", 0))
    monkeypatch.setattr(model, "device_name", lambda d: gpu_name)
    monkeypatch.setattr(power_profile, "meter_for", lambda device: (dev, ""))
    monkeypatch.setattr(power_profile, "_matmul_loop", lambda device: dev.work)
    return dev


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from hetplan.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_profile_power_files_a_gpu_under_the_type_its_name_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    _as_gpu(monkeypatch, "NVIDIA H100 80GB HBM3")
    argv = ["profile-power", "--device", "cuda:0", "--seconds", "1", "--out", str(tmp_path)]
    code, out, err = _cli([*argv, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert (data["type"], data["power_limit_w"], data["refused"]) == ("H100-SXM", 700.0, None)
    assert len(load_points("H100-SXM", tmp_path)) == 2


def test_profile_power_on_an_unknown_gpu_asks_for_its_type(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _as_gpu(monkeypatch, "NVIDIA Quantum Q9000")
    code, _, err = _cli(["profile-power", "--device", "cuda:0", "--seconds", "1"], capsys)
    assert code == 2
    assert err.strip() == (
        "hetplan: error: GPU 'NVIDIA Quantum Q9000' matches no catalog device type; "
        "name one with --type"
    )
