"""GPU calibrations timed per call priced on stream, fp16 on bf16 curves, the host bound."""

from __future__ import annotations

import dataclasses

import pytest

from hetplan.cluster import Device, device_type
from hetplan.cost.calibration import (
    DEVICE_KERNEL_MIN_S,
    STREAM,
    Calibration,
    RateCurve,
    RatePoint,
    on_stream,
)
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph.types import LayerInfo, ModelGraph, OpWork

FLOOR = 28e-6  # seconds: the per-call floor of the H100 calibrations in shared/gpu-truth


def curve(op_class: str, *points: tuple[float, float]) -> RateCurve:
    return RateCurve(
        op_class=op_class,
        backward=False,
        points=tuple(RatePoint(work=w, seconds=s) for w, s in points),
    )


def gpu_cal(dtype: str = "bf16", **over: object) -> Calibration:
    fields: dict[str, object] = {
        "device_type": "H100-SXM", "device_name": "gpu", "device": "cuda:0", "dtype": dtype,
        "threads": 16, "timestamp": "2026-01-01T00:00:00+00:00", "torch_version": "x",
        "curves": (
            curve("matmul", (1e5, FLOOR), (1e9, FLOOR), (1e12, 2e-3)),
            curve("memory", (1e3, FLOOR), (1e9, 1e-3)),
        ),
    }  # fmt: skip
    fields.update(over)
    return Calibration(**fields)  # type: ignore[arg-type]


def seconds(cal: Calibration) -> list[float]:
    return [p.seconds for c in cal.curves for p in c.points]


def test_a_per_call_gpu_calibration_loses_its_floor_on_stream() -> None:
    shift = FLOOR - DEVICE_KERNEL_MIN_S  # by hand: every point less the floor, plus 3 us
    got = on_stream(gpu_cal())
    assert got.timing == STREAM
    assert seconds(got) == pytest.approx(
        [DEVICE_KERNEL_MIN_S, DEVICE_KERNEL_MIN_S, 2e-3 - shift, DEVICE_KERNEL_MIN_S, 1e-3 - shift]
    )


def test_cpu_and_stream_timed_calibrations_are_left_as_they_are() -> None:
    cpu = gpu_cal(device="cpu", device_type="cpu")
    stream = gpu_cal(timing=STREAM)
    assert on_stream(cpu) is cpu
    assert on_stream(stream) is stream


LAYER = LayerInfo(
    name="l", fwd_flops=1e9, bwd_flops=2e9, params=0, param_bytes=0, out_bytes=1e6,
    saved_bytes=1e6, fwd_io_bytes=1e6, bwd_io_bytes=2e6, fwd_kernels=40, bwd_kernels=80,
    work=(
        OpWork(op_class="matmul", backward=False, flops=1e9, io_bytes=1e6, kernels=1),
        OpWork(op_class="matmul", backward=True, flops=2e9, io_bytes=2e6, kernels=2),
    ),
)  # fmt: skip
GRAPH = ModelGraph(
    name="toy", input_shape=(8,), input_bytes=32, dtype="fp16", layers=(LAYER,), cut_bytes=()
)
H100 = Device(id="g.0", type=device_type("H100-SXM"), node="g", index=0)
T4 = Device(id="t.0", type=device_type("T4"), node="t", index=0)


def test_fp16_is_priced_on_bf16_curves_where_the_peaks_are_equal() -> None:
    bf16 = gpu_cal()
    model = AnalyticalCompute("fp16", calibrations=[bf16])
    assert model.source(H100) == "calibrated on H100-SXM (bf16 curves: same peak)"
    same = AnalyticalCompute("bf16", calibrations=[bf16])
    graph_bf16 = dataclasses.replace(GRAPH, dtype="bf16")
    assert model.layer_costs(GRAPH, H100, 4)[0].fwd_s == pytest.approx(
        same.layer_costs(graph_bf16, H100, 4)[0].fwd_s
    )
    # A T4 runs fp16 at 8x its bf16 rate (catalog): its bf16 curves would be wrong for fp16.
    t4 = AnalyticalCompute("fp16", calibrations=[gpu_cal(device_type="T4")])
    assert t4.source(T4) == "analytical"


def test_a_layer_of_many_small_kernels_takes_their_issue_time() -> None:
    issue = 20e-6  # seconds per kernel, as calibrate measures it
    model = AnalyticalCompute("bf16", calibrations=[gpu_cal(issue_s=issue)])
    graph = dataclasses.replace(GRAPH, dtype="bf16")
    [cost] = model.layer_costs(graph, H100, 1)
    assert cost.fwd_s == pytest.approx(40 * issue)  # 1 GFLOP of matmul takes far less
    assert cost.bwd_s == pytest.approx(80 * issue)
    [fast] = AnalyticalCompute("bf16", calibrations=[gpu_cal()]).layer_costs(graph, H100, 1)
    assert fast.fwd_s < 40 * issue


def conv_cal(device: str) -> Calibration:
    """Two 3x3 probe families: intensity 20 runs at 1e12 FLOP/s, intensity 200 at 1e14."""

    def family(intensity: float, rate: float) -> RateCurve:
        return RateCurve(
            op_class="conv", backward=False, intensity=intensity,
            points=tuple(RatePoint(work=w, seconds=w / rate) for w in (1e9, 1e12)),
        )  # fmt: skip

    return gpu_cal(
        device=device, timing=STREAM, dtype="bf16",
        curves=(family(20.0, 1e12), family(200.0, 1e14),
                curve("memory", (1e3, 1e-9), (1e12, 1e-3))),
    )  # fmt: skip


CONV_LAYER = LayerInfo(
    name="c", fwd_flops=1e9, bwd_flops=0.0, params=0, param_bytes=0, out_bytes=0,
    saved_bytes=0, fwd_io_bytes=5e7, bwd_io_bytes=0, fwd_kernels=1,
    work=(OpWork(op_class="conv", backward=False, flops=1e9, io_bytes=5e7, kernels=1,
                 probe_intensity=200.0),),
)  # fmt: skip


def test_a_gpu_places_convolutions_by_shape_a_cpu_by_bytes() -> None:
    # FLOPs per byte 20 (the slow family); shaped like the probe of intensity 200 (fast).
    graph = dataclasses.replace(GRAPH, dtype="bf16", layers=(CONV_LAYER,))
    gpu = AnalyticalCompute("bf16", calibrations=[conv_cal("cuda:0")])
    [on_gpu] = gpu.layer_costs(graph, H100, 1)
    assert on_gpu.fwd_s == pytest.approx(1e9 / 1e14)
    cpu_dev = Device(id="c.0", type=device_type("cpu"), node="c", index=0)
    cpu_cal = dataclasses.replace(conv_cal("cpu"), device_type="cpu", threads=1)
    [on_cpu] = AnalyticalCompute("bf16", calibrations=[cpu_cal]).layer_costs(graph, cpu_dev, 1)
    assert on_cpu.fwd_s == pytest.approx(1e9 / 1e12)
