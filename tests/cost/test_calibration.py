"""Calibration curves and class-by-class layer pricing against hand-computed numbers."""

from __future__ import annotations

import dataclasses
import math

import pytest

from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.calibration import Calibration, RateCurve, RatePoint
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph.types import LayerInfo, ModelGraph, OpWork


def curve(op_class: str, *points: tuple[float, float], backward: bool = False) -> RateCurve:
    return RateCurve(
        op_class=op_class,
        backward=backward,
        points=tuple(RatePoint(work=w, seconds=s) for w, s in points),
    )


def test_curve_interpolates_log_log_and_clamps() -> None:
    c = curve("matmul", (1e5, 1e-5), (1e7, 1e-4))
    # Between the points: log-log line of slope log(10)/log(100) = 1/2.
    assert c.seconds(2e6) == pytest.approx(1e-5 * math.sqrt(20))
    assert c.seconds(1e5) == pytest.approx(1e-5)
    # Below the smallest probe: its time (launch bound); above the largest: its rate.
    assert c.seconds(10.0) == pytest.approx(1e-5)
    assert c.seconds(1e9) == pytest.approx(1e-4 * 100)
    assert c.seconds(0.0) == 0.0
    assert c.best_rate() == pytest.approx(1e11)


def test_curve_never_gets_faster_for_more_work() -> None:
    # Noise made the middle probe slower than the last one: the last is lifted to it.
    c = curve("memory", (1e3, 1e-6), (1e4, 5e-6), (1e5, 4e-6))
    assert c.seconds(1e5) == pytest.approx(5e-6)
    assert c.seconds(5e4) == pytest.approx(5e-6)


def test_curve_rejects_bad_points() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        curve("matmul")
    with pytest.raises(ValueError, match="by work"):
        curve("matmul", (1e6, 1e-5), (1e5, 1e-6))
    with pytest.raises(ValueError, match="op_class"):
        curve("gemm", (1e6, 1e-5))


TYPE = DeviceType(
    name="toy",
    peak_flops={"fp32": 1e12},
    memory_bandwidth=1e11,
    memory_bytes=16e9,
    idle_power_w=1.0,
    max_power_w=2.0,
    compute_efficiency=0.5,
    memory_efficiency=0.8,
    kernel_overhead_s=1e-6,
)
DEVICE = Device(id="d0", type=TYPE, node="n0", index=0)

# One layer: 1 MFLOP/sample of matmul in 2 kernels (1 kB/sample of I/O) and 3 memory-bound
# kernels moving 4 kB/sample, 4 kB of weights.
LAYER = LayerInfo(
    name="l0",
    fwd_flops=1e6,
    bwd_flops=0.0,
    params=1000,
    param_bytes=4000,
    out_bytes=0,
    saved_bytes=0,
    fwd_io_bytes=5000,
    bwd_io_bytes=0,
    fwd_kernels=5,
    work=(
        OpWork(op_class="matmul", backward=False, flops=1e6, io_bytes=1000, kernels=2),
        OpWork(op_class="memory", backward=False, flops=0.0, io_bytes=4000, kernels=3),
    ),
)
GRAPH = ModelGraph(
    name="toy", input_shape=(8,), input_bytes=32, dtype="fp32", layers=(LAYER,), cut_bytes=()
)
CAL = Calibration(
    device_type="toy",
    device_name="toy",
    device="cpu",
    dtype="fp32",
    threads=1,
    curves=(
        curve("matmul", (1e5, 1e-5), (1e7, 1e-4)),
        curve("memory", (1e3, 1e-6), (1e6, 1e-4)),
    ),
    timestamp="2026-01-01T00:00:00+00:00",
    torch_version="x",
)


def test_calibrated_layer_is_priced_class_by_class() -> None:
    batch = 4
    # matmul: 2 kernels of 4 * 1e6 / 2 = 2e6 FLOPs on the curve; its memory floor (4 kB of
    # I/O + 4 kB of weights, as 2 memory-bound kernels of 4 kB on the memory curve) is lower.
    matmul = 2 * 1e-5 * (2e6 / 1e5) ** 0.5
    assert matmul > 2 * 1e-6 * (4000 / 1e3) ** (2 / 3)
    # memory: 3 kernels of 4 * 4000 / 3 B each, on a log-log line of slope 2/3.
    memory = 3 * 1e-6 * (batch * 4000 / 3 / 1e3) ** (2 / 3)
    compute = AnalyticalCompute("fp32", calibrations=[CAL])
    (cost,) = compute.layer_costs(GRAPH, DEVICE, batch)
    assert cost.fwd_s == pytest.approx(matmul + memory)
    # No backward kernels recorded: only its weight traffic (read W, write dW) remains.
    assert cost.bwd_s == pytest.approx(2 * 4000 / 1e10)
    assert cost.source == "calibrated on toy"


def test_calibration_of_another_dtype_or_type_is_not_used() -> None:
    assert AnalyticalCompute("bf16", calibrations=[CAL]).source(DEVICE) == "analytical"
    other = Device(id="d1", type=dataclasses.replace(TYPE, name="x"), node="n", index=0)
    assert AnalyticalCompute("fp32", calibrations=[CAL]).source(other) == "analytical"


def test_uncalibrated_classes_are_rooflines_each() -> None:
    batch = 4
    bw = 1e11 * 0.8
    matmul = max(batch * 1e6 / (1e12 * 0.5), (batch * 1000 + 4000) / bw) + 2 * 1e-6
    memory = batch * 4000 / bw + 3 * 1e-6
    (cost,) = AnalyticalCompute("fp32").layer_costs(GRAPH, DEVICE, batch)
    assert cost.fwd_s == pytest.approx(matmul + memory)
    assert cost.source == "analytical"


def test_small_micro_batches_run_less_efficiently_when_calibrated() -> None:
    compute = AnalyticalCompute("fp32", calibrations=[CAL])
    per_sample = [compute.layer_costs(GRAPH, DEVICE, b)[0].fwd_s / b for b in (1, 4, 16)]
    assert per_sample[0] > per_sample[1] > per_sample[2]


def test_intensity_interpolates_between_families_log_log() -> None:
    def flat(seconds: float, intensity: float) -> RateCurve:
        points = (RatePoint(work=1e3, seconds=seconds), RatePoint(work=1e9, seconds=seconds))
        return RateCurve(op_class="matmul", backward=False, points=points, intensity=intensity)

    cal = dataclasses.replace(CAL, curves=(flat(4e-5, 64.0), flat(1e-5, 16.0)))
    # 32 is the geometric middle of 16 and 64: the geometric mean of the two times.
    assert cal.seconds("matmul", False, 1e6, 32.0) == pytest.approx(2e-5)
    assert cal.seconds("matmul", False, 1e6, 1.0) == pytest.approx(1e-5)  # nearest family
    assert cal.seconds("matmul", False, 1e6, 1e4) == pytest.approx(4e-5)
    # A backward without curves of its own uses the forward's; an unmeasured class: None.
    assert cal.seconds("matmul", True, 1e6, 16.0) == pytest.approx(1e-5)
    assert cal.seconds("conv", False, 1e6, 16.0) is None


def test_weight_bound_kernels_are_priced_by_their_bytes() -> None:
    # One row through a 4 MB weight: the memory curve (1e3 B in 1 us .. 1e6 B in 100 us,
    # 1e10 B/s beyond) bounds it, not the FLOP curve.
    big = dataclasses.replace(
        LAYER, param_bytes=4_000_000, work=(LAYER.work[0],), fwd_io_bytes=1000, fwd_kernels=2
    )
    graph = dataclasses.replace(GRAPH, layers=(big,))
    (cost,) = AnalyticalCompute("fp32", calibrations=[CAL]).layer_costs(graph, DEVICE, 1)
    per_kernel = (1000 + 4_000_000) / 2
    assert cost.fwd_s == pytest.approx(2 * 1e-4 * per_kernel / 1e6)
