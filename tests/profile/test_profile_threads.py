"""Profiles and calibrations keep their thread count; a CPU device takes the matching one.

Expected factors are Amdahl's closed form written out here: a time measured on one thread is
``s + (1 - s) / n`` of itself on ``n`` threads, ``s`` the model's named serial fraction.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hetplan.cli.cmd_profile import store_profile
from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Cluster, Device, Link
from hetplan.cost.calibration import Calibration, RateCurve, RatePoint
from hetplan.cost.threads import SERIAL_FRACTION
from hetplan.cost.types import LayerCost
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.profile.calib_store import load_calibrations, save_calibration
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profiles
from hetplan.run.measurement.writeback_types import run_threads

S = SERIAL_FRACTION
CPU = device_type("cpu")
GRAPH = ModelGraph(
    name="m", input_shape=(8,), input_bytes=32, dtype="fp32", cut_bytes=(4,),
    layers=tuple(
        LayerInfo(name=n, fwd_flops=1e3, bwd_flops=2e3, params=0, param_bytes=4, out_bytes=4,
                  saved_bytes=4, fwd_io_bytes=8, bwd_io_bytes=8)
        for n in ("l0", "l1")
    ),
)  # fmt: skip
# l0: fwd 1 ms + 0.1 ms/sample; at batch 2: 1.2 ms. 6 threads measured 3x faster.
ONE_FITS = {"l0": (1e-3, 1e-4, 2e-3, 2e-4), "l1": (3e-3, 0.0, 1e-3, 1e-3)}
SIX_FITS = {k: tuple(x / 3 for x in v) for k, v in ONE_FITS.items()}


def cpu(cores: tuple[int, ...] | None, index: int = 0) -> Device:
    return Device(id=f"n0.{index}", type=CPU, node="n0", index=index, cpus=cores)


SIX = cpu((2, 3, 4, 5, 6, 7))
ONE = cpu((0,))


def at(profile_factory, threads: int, fits=ONE_FITS, **kw):  # type: ignore[no-untyped-def]
    return dataclasses.replace(profile_factory(fits=fits, **kw), threads=threads)


def test_matching_profile_is_preferred_unscaled(make_profile) -> None:
    model = MeasuredCompute([at(make_profile, 1), at(make_profile, 6, SIX_FITS)])
    six = model.layer_costs(GRAPH, SIX, 2)
    assert six[0].fwd_s == pytest.approx(1.2e-3 / 3)
    assert {c.source for c in six} == {"measured on cpu (6 threads)"}
    one = model.layer_costs(GRAPH, ONE, 2)
    assert one[0].fwd_s == pytest.approx(1.2e-3)
    assert {c.source for c in one} == {"measured on cpu"}


def test_one_thread_profile_is_scaled_to_six(make_profile) -> None:
    model = MeasuredCompute([at(make_profile, 1)])
    six = model.layer_costs(GRAPH, SIX, 2)
    assert six[0].fwd_s == pytest.approx(1.2e-3 * (S + (1 - S) / 6))
    assert {c.source for c in six} == {"measured on cpu (1 thread, scaled to 6 threads)"}
    # The optimizer step (50 ms on one thread) scales alike.
    assert model.optimizer_s(GRAPH, SIX) == pytest.approx(0.05 * (S + (1 - S) / 6))


def test_unrecorded_threads_count_as_one(make_profile) -> None:
    imported = dataclasses.replace(at(make_profile, 0), source="imported")
    six = MeasuredCompute([imported]).layer_costs(GRAPH, SIX, 2)
    assert six[0].fwd_s == pytest.approx(1.2e-3 * (S + (1 - S) / 6))


def test_thread_match_comes_before_written_back_or_not(make_profile) -> None:
    back = dataclasses.replace(at(make_profile, 6, SIX_FITS), source="written-back")
    model = MeasuredCompute([at(make_profile, 1), back])
    six = model.layer_costs(GRAPH, SIX, 2)
    assert six[0].fwd_s == pytest.approx(1.2e-3 / 3)
    assert {c.source for c in six} == {"measured on cpu (6 threads) (written back)"}
    assert {c.source for c in model.layer_costs(GRAPH, ONE, 2)} == {"measured on cpu"}


class Recording:
    """Analytical stand-in that notes which devices it priced (1 s per layer and pass)."""

    def __init__(self) -> None:
        self.seen: list[Device] = []

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        self.seen.append(device)
        return [LayerCost(fwd_s=1.0, bwd_s=1.0, source="analytical") for _ in graph.layers]


def test_scaling_to_another_type_prices_the_reference_at_its_threads(make_profile) -> None:
    fallback = Recording()
    model = MeasuredCompute([at(make_profile, 6, SIX_FITS)], fallback=fallback)
    gpu = Device(id="n0.1", type=device_type("A100-40GB"), node="n0", index=1)
    costs = model.layer_costs(GRAPH, gpu, 2)
    assert {c.source for c in costs} == {"scaled from cpu (6 threads)"}
    refs = [d for d in fallback.seen if d.type.is_cpu]
    assert refs and all(len(d.cpus or ()) == 6 for d in refs)


def test_cpu_profiles_of_several_thread_counts_keep_their_own_files(
    tmp_path: Path, make_profile
) -> None:
    one, six = at(make_profile, 1), at(make_profile, 6, SIX_FITS)
    p1, p6 = store_profile(one, tmp_path), store_profile(six, tmp_path)
    assert p1.name == "cpu__m__8__b1-2-4__fp32.json"  # one thread: the name it always had
    assert p6.name == "cpu__m__8__b1-2-4__fp32__t6.json"
    assert sorted(p.threads for p in load_profiles(tmp_path)) == [1, 6]


def _calibration(threads: int, device: str = "cpu", kind: str = "cpu") -> Calibration:
    point = (RatePoint(work=1.0, seconds=1e-3),)
    return Calibration(
        device_type=kind, device_name="x", device=device, dtype="fp32", threads=threads,
        curves=(RateCurve(op_class="matmul", backward=False, points=point),),
        timestamp=f"2026-01-0{threads % 9 + 1}", torch_version="x",
    )  # fmt: skip


def test_calibrations_of_several_thread_counts_keep_their_own_files(tmp_path: Path) -> None:
    assert save_calibration(_calibration(1), tmp_path).name == "cpu__fp32.json"
    assert save_calibration(_calibration(6), tmp_path).name == "cpu__fp32__t6.json"
    # A GPU's host threads do not name its file.
    gpu = _calibration(16, "cuda:0", "A100-40GB")
    assert save_calibration(gpu, tmp_path).name == "A100-40GB__fp32.json"
    assert sorted(c.threads for c in load_calibrations(tmp_path)) == [1, 6, 16]


def test_old_calibration_file_loads_with_its_recorded_threads(tmp_path: Path) -> None:
    # Before thread counts named files, a 4-thread calibration was stored as cpu__fp32.json.
    old = _calibration(4)
    path = save_calibration(old, tmp_path).rename(tmp_path / "calibrations" / "cpu__fp32.json")
    assert path.is_file() and load_calibrations(tmp_path) == [old]


def _cluster(*devices: Device) -> Cluster:
    shm = Link(kind="shm", bandwidth=1e9, latency_s=1e-6)
    return Cluster(name="c", devices=devices, intra_links={"n0": shm})


def test_write_back_records_the_ranks_threads() -> None:
    gpu = Device(id="n0.2", type=device_type("A100-40GB"), node="n0", index=2)
    cluster = _cluster(cpu((0, 1, 2, 3, 4, 5)), cpu((6, 7, 8, 9, 10, 11), 1), gpu)
    assert run_threads(cluster, ["n0.0", "n0.1", "n0.2"], "cpu") == 6
    assert run_threads(cluster, ["n0.2"], "A100-40GB") == 0  # a GPU's: unknown, as before
    mixed = _cluster(cpu((0,)), cpu((1, 2), 1))
    assert run_threads(mixed, ["n0.0", "n0.1"], "cpu") == 0  # 1 and 2 threads: unknown
