"""CPU devices priced by their cores: Amdahl scaling and thread-matched calibrations.

Expected factors are Amdahl's closed form written out here, ``s + (1 - s) / n`` for the time
on ``n`` threads relative to one, with ``s`` the model's named serial fraction.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from hetplan.cluster.catalog import device_type
from hetplan.cluster.config import load_cluster
from hetplan.cluster.spec import Device
from hetplan.cost.calibration import Calibration, RateCurve, RatePoint
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.threads import (
    SERIAL_FRACTION,
    amdahl_speedup,
    device_threads,
    nearest_threads,
    thread_scale,
)
from hetplan.graph.types import LayerInfo, ModelGraph, OpWork

S = SERIAL_FRACTION
CPU = device_type("cpu")
GPU = device_type("A100-40GB")


def cpu(cores: tuple[int, ...] | None = None, speed: float = 1.0) -> Device:
    return Device(id="n0.0", type=CPU, node="n0", index=0, cpus=cores, speed=speed)


SIX = cpu((2, 3, 4, 5, 6, 7))
ONE = cpu((0,))

# One layer: 1 MFLOP/sample of matmul in 2 kernels and 3 memory-bound kernels.
LAYER = LayerInfo(
    name="l0", fwd_flops=1e6, bwd_flops=0.0, params=1000, param_bytes=4000, out_bytes=0,
    saved_bytes=0, fwd_io_bytes=5000, bwd_io_bytes=0, fwd_kernels=5,
    work=(
        OpWork(op_class="matmul", backward=False, flops=1e6, io_bytes=1000, kernels=2),
        OpWork(op_class="memory", backward=False, flops=0.0, io_bytes=4000, kernels=3),
    ),
)  # fmt: skip
GRAPH = ModelGraph(
    name="toy", input_shape=(8,), input_bytes=32, dtype="fp32", layers=(LAYER,), cut_bytes=()
)


def calibration(threads: int, seconds: float, when: str = "2026-01-01") -> Calibration:
    """Flat curves: every matmul and memory kernel takes ``seconds``."""
    flat = (RatePoint(work=1.0, seconds=seconds), RatePoint(work=1e12, seconds=seconds))
    return Calibration(
        device_type="cpu", device_name="x", device="cpu", dtype="fp32", threads=threads,
        curves=(
            RateCurve(op_class="matmul", backward=False, points=flat),
            RateCurve(op_class="memory", backward=False, points=flat),
        ),
        timestamp=when, torch_version="x",
    )  # fmt: skip


def test_amdahl_by_hand() -> None:
    assert amdahl_speedup(1) == pytest.approx(1.0)
    assert amdahl_speedup(6) == pytest.approx(1 / (S + (1 - S) / 6))
    # 1 thread measured, 6 wanted: time x (s + (1 - s) / 6); 6 -> 2: x (s + (1-s)/2) / (...)
    assert thread_scale(1, 6) == pytest.approx(S + (1 - S) / 6)
    assert thread_scale(6, 2) == pytest.approx((S + (1 - S) / 2) / (S + (1 - S) / 6))


def test_never_more_than_linear() -> None:
    for m in range(1, 33):
        for n in range(m, 65):
            assert amdahl_speedup(n) / amdahl_speedup(m) <= n / m + 1e-12
            assert 1 / thread_scale(m, n) <= n / m + 1e-12


def test_threads_of_a_device() -> None:
    assert device_threads(SIX) == 6
    assert device_threads(cpu()) == 1  # no cpus: one core, as the catalog's cpu
    assert device_threads(cpu((1, 1))) == 1  # one core listed twice is still one core
    gpu = Device(id="n0.1", type=GPU, node="n0", index=1, cpus=(0, 1, 2))
    assert device_threads(gpu) is None  # a GPU's speed is not its host threads'


def test_nearest_thread_count_in_ratio() -> None:
    assert nearest_threads({1, 6}, 6) == 6
    assert nearest_threads({1, 6}, 4) == 6  # 6/4 = 1.5 is closer than 4/1
    assert nearest_threads({1, 6}, 2) == 1  # 2/1 = 2 is closer than 6/2
    assert nearest_threads({1, 4}, 2) == 1  # a tie (2x either way): the fewer threads


def test_six_threads_priced_by_the_catalog_peak_scaled() -> None:
    model = AnalyticalCompute("fp32")
    (one,) = model.layer_costs(GRAPH, ONE, 4)
    (six,) = model.layer_costs(GRAPH, SIX, 4)
    assert six.fwd_s == pytest.approx(one.fwd_s * (S + (1 - S) / 6))
    assert one.source == "analytical"
    assert six.source == "analytical (1 thread, scaled to 6 threads)"
    # The speed share still applies on top.
    (half,) = model.layer_costs(GRAPH, dataclasses.replace(SIX, speed=0.5), 4)
    assert half.fwd_s == pytest.approx(six.fwd_s / 0.5)


def test_matching_calibration_is_preferred_unscaled() -> None:
    # 5 kernels (2 matmul, 3 memory) per forward: 5 x the flat kernel time.
    model = AnalyticalCompute("fp32", calibrations=[calibration(1, 1e-3), calibration(6, 4e-4)])
    (six,) = model.layer_costs(GRAPH, SIX, 4)
    assert six.fwd_s == pytest.approx(5 * 4e-4)
    assert six.source == "calibrated on cpu (6 threads)"
    (one,) = model.layer_costs(GRAPH, ONE, 4)
    assert one.fwd_s == pytest.approx(5 * 1e-3)
    assert one.source == "calibrated on cpu"


def test_other_thread_count_is_scaled_from_the_nearest() -> None:
    only_one = AnalyticalCompute("fp32", calibrations=[calibration(1, 1e-3)])
    (six,) = only_one.layer_costs(GRAPH, SIX, 4)
    assert six.fwd_s == pytest.approx(5 * 1e-3 * (S + (1 - S) / 6))
    assert six.source == "calibrated on cpu (1 thread, scaled to 6 threads)"
    both = AnalyticalCompute("fp32", calibrations=[calibration(1, 1e-3), calibration(6, 4e-4)])
    (four,) = both.layer_costs(GRAPH, cpu((0, 1, 2, 3)), 4)
    assert four.fwd_s == pytest.approx(5 * 4e-4 * (S + (1 - S) / 4) / (S + (1 - S) / 6))
    assert four.source == "calibrated on cpu (6 threads, scaled to 4 threads)"


def test_newest_calibration_of_a_thread_count_wins() -> None:
    cals = [calibration(6, 4e-4, "2026-01-01"), calibration(6, 3e-4, "2026-02-01")]
    (six,) = AnalyticalCompute("fp32", calibrations=cals).layer_costs(GRAPH, SIX, 4)
    assert six.fwd_s == pytest.approx(5 * 3e-4)


def test_gpu_ignores_host_threads() -> None:
    gpu = Device(id="n0.1", type=GPU, node="n0", index=1, cpus=(0, 1, 2, 3))
    bare = dataclasses.replace(gpu, cpus=None)
    model = AnalyticalCompute("fp32")
    assert model.layer_costs(GRAPH, gpu, 4) == model.layer_costs(GRAPH, bare, 4)
    assert model.source(gpu) == "analytical"


def test_cluster_file_cpus_set_the_threads(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: mixed
            nodes:
              - name: n0
                devices:
                  - {type: A100-40GB, count: 1}
                  - {type: cpu, count: 2, cpus: [[0], [2, 3, 4, 5, 6, 7]]}
                link: {type: PCIe4x16}
            """
        )
    )
    cluster = load_cluster(path)
    one, six = cluster.device("n0.1"), cluster.device("n0.2")
    assert (device_threads(one), device_threads(six)) == (1, 6)
    model = AnalyticalCompute("fp32")
    t1 = model.layer_costs(GRAPH, one, 4)[0].fwd_s
    t6 = model.layer_costs(GRAPH, six, 4)[0].fwd_s
    assert t6 / t1 == pytest.approx(S + (1 - S) / 6)
