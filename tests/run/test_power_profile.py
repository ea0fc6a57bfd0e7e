"""Measured power points, their fit, and its use by the cost model (hand-computed figures)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.run.energy_check import gpu_power_points
from hetplan.run.measure import Measurement, RankFigures
from hetplan.run.power_profile import (
    load_points,
    measure_power_points,
    record_power_points,
    with_power_fits,
)

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


def test_points_accumulate_and_refit(tmp_path: Path) -> None:
    first = record_power_points("cpu", [(0.5, 60.0)], tmp_path)
    assert first.fit is None and first.refused is None  # one load: no slope
    fit = record_power_points("cpu", [(1.0, 100.0)], tmp_path).fit
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


def test_a_fit_above_the_limit_or_the_rest_power_is_refused(tmp_path: Path) -> None:
    """After profile-power's rest 72.5 W and load 690 W on a 700 W part, run points that put
    idle at 357 W and max at 550 W (what three bad H100 runs did) are refused, and so are
    points whose line ends above the limit; the first fit stands."""
    kind = "H100-SXM"
    first = record_power_points(kind, [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    assert first.refused is None and first.fit is not None
    # (0.9, 1500): the least-squares line through the three points ends far above 700 W
    over = record_power_points(kind, [(0.9, 1500.0)], tmp_path, limit_w=700.0)
    assert over.refused is not None and "above the power limit 700 W" in over.refused
    assert over.fit == first.fit and load_points(kind, tmp_path) == [(0.0, 72.5), (1.0, 690.0)]
    # five points on idle 357 W, max 550 W pull the fit's idle far above 72.5 W at rest
    bad = [(u, 357.0 + 193.0 * u) for u in (0.5, 0.6, 0.7, 0.8, 0.9)] * 4
    high = record_power_points(kind, bad, tmp_path, limit_w=700.0)
    assert high.refused is not None and "above the measured rest power 72 W" in high.refused
    assert high.fit == first.fit


def test_a_run_s_refusal_says_how_to_measure_afresh(tmp_path: Path) -> None:
    record_power_points("H100-SXM", [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    rec = record_power_points("H100-SXM", [(0.9, 1500.0)], tmp_path, limit_w=700.0)
    assert rec.refused is not None and "`hetplan profile-power` measures" in rec.refused


def test_profile_power_s_points_replace_earlier_points_that_contradict_them(
    tmp_path: Path,
) -> None:
    """Points stored before runs were checked (idle 357 W / max 550 W, no rest reading) would
    refuse every later point; profile-power's direct rest and load readings replace them."""
    kind = "H100-SXM"
    bad = [(u, 357.0 + 193.0 * u) for u in (0.5, 0.6, 0.7, 0.8, 0.9)]
    stale = record_power_points(kind, bad, tmp_path, limit_w=700.0)
    assert stale.fit is not None and stale.fit.idle_w == pytest.approx(357.0)
    rec = record_power_points(kind, [(0.0, 72.5), (1.0, 704.0)], tmp_path, limit_w=700.0,
                              direct=True)  # fmt: skip
    assert rec.refused is None and rec.note is not None
    assert rec.note.startswith("dropped the 5 earlier points, with which the fit's idle")
    assert rec.fit is not None and (rec.fit.idle_w, rec.fit.max_w) == pytest.approx((72.5, 704))
    assert load_points(kind, tmp_path) == [(0.0, 72.5), (1.0, 704.0)]


def test_direct_points_that_are_themselves_implausible_are_refused(tmp_path: Path) -> None:
    record_power_points("H100-SXM", [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    # a load reading of 900 W on a 700 W part: the counter, not the old points, is wrong
    rec = record_power_points("H100-SXM", [(0.0, 72.0), (1.0, 900.0)], tmp_path, limit_w=700.0,
                              direct=True)  # fmt: skip
    assert rec.refused is not None and rec.note is None
    assert load_points("H100-SXM", tmp_path) == [(0.0, 72.5), (1.0, 690.0)]


class _FakeGpu(FakeDevice):
    """A fake GPU behind NVML: the fake counter and a 700 W enforced limit."""

    name = "nvml"

    def power_limit_w(self) -> float:
        return 700.0


def _as_gpu(monkeypatch: pytest.MonkeyPatch, gpu_name: str) -> _FakeGpu:
    """``cuda:0`` is a GPU called ``gpu_name`` with a fake meter and a fake load."""
    import torch

    from hetplan.profile import model
    from hetplan.run import power_profile

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
