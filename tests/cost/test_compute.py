"""Analytical roofline per layer against hand-computed numbers."""

from __future__ import annotations

import dataclasses

import pytest

from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.compute import AnalyticalCompute, gpipe_compute_time, roofline_time
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import LayerInfo, ModelGraph


def layer(name: str, **kw: float) -> LayerInfo:
    base = {
        "fwd_flops": 0.0,
        "bwd_flops": 0.0,
        "params": 0,
        "param_bytes": 0,
        "out_bytes": 0,
        "saved_bytes": 0,
        "fwd_io_bytes": 0,
        "bwd_io_bytes": 0,
        "fwd_kernels": 0,
        "bwd_kernels": 0,
    }
    base.update(kw)
    return LayerInfo(name=name, **base)  # type: ignore[arg-type]


# "gemm": compute-bound; "norm": memory-bound with weights.
GRAPH = ModelGraph(
    name="toy",
    input_shape=(8,),
    input_bytes=32,
    dtype="fp32",
    layers=(
        layer(
            "gemm",
            fwd_flops=1e9,
            bwd_flops=2e9,
            params=250_000,
            param_bytes=1_000_000,
            fwd_io_bytes=1000,
            bwd_io_bytes=2000,
            fwd_kernels=1,
            bwd_kernels=2,
        ),
        layer(
            "norm",
            fwd_flops=1e3,
            bwd_flops=2e3,
            params=250_000_000,
            param_bytes=10**9,
            fwd_io_bytes=10**8,
            bwd_io_bytes=2 * 10**8,
            fwd_kernels=3,
            bwd_kernels=4,
        ),
    ),
    cut_bytes=(1000,),
)


def test_roofline_compute_and_memory_bound() -> None:
    kw = {
        "peak_flops": 1e12,
        "memory_bandwidth": 1e11,
        "compute_efficiency": 0.5,
        "memory_efficiency": 0.8,
        "kernel_overhead_s": 1e-5,
    }
    # Compute-bound: 1e9 / (1e12 * 0.5) = 2 ms > 1e6 / 8e10 = 12.5 us; plus 2 kernels.
    assert roofline_time(1e9, 1e6, 2, **kw) == pytest.approx(2e-3 + 2e-5)
    # Memory-bound: 8e8 / 8e10 = 10 ms > 1e6 / 5e11 = 2 us.
    assert roofline_time(1e6, 8e8, 0, **kw) == pytest.approx(1e-2)


def test_layer_costs_by_hand(gpu: DeviceType) -> None:
    device = Device(id="n0.0", type=gpu, node="n0", index=0)  # eff 1, overhead 0
    model: ComputeModel = AnalyticalCompute()
    gemm, norm = model.layer_costs(GRAPH, device, batch=2)
    # gemm fwd: max(2e9 / 1e12, (2e3 + 1e6) / 1e11) = 2 ms; bwd: 4e9 / 1e12 = 4 ms.
    assert gemm.fwd_s == pytest.approx(2e-3)
    assert gemm.bwd_s == pytest.approx(4e-3)
    # norm fwd: (2e8 + 1e9 weights read once) / 1e11 = 12 ms.
    assert norm.fwd_s == pytest.approx(1.2e-2)
    # norm bwd: (4e8 + 2e9: read weights, write gradients) / 1e11 = 24 ms.
    assert norm.bwd_s == pytest.approx(2.4e-2)
    assert gemm.source == "analytical"


def test_efficiency_overhead_speed_and_dtype(gpu: DeviceType) -> None:
    gpu = dataclasses.replace(
        gpu, compute_efficiency=0.5, memory_efficiency=0.5, kernel_overhead_s=1e-4
    )
    slow = Device(id="n0.0", type=gpu, node="n0", index=0, speed=0.5)
    gemm, norm = AnalyticalCompute().layer_costs(GRAPH, slow, batch=2)
    # (2e9 / 5e11 + 1 kernel * 0.1 ms) / 0.5.
    assert gemm.fwd_s == pytest.approx((4e-3 + 1e-4) / 0.5)
    assert norm.bwd_s == pytest.approx((2.4e9 / 5e10 + 4e-4) / 0.5)
    # fp16 peak is 4x: the compute-bound layer gets 4x faster (before overhead).
    half = AnalyticalCompute("fp16").layer_costs(GRAPH, slow, batch=2)[0]
    assert half.fwd_s == pytest.approx((1e-3 + 1e-4) / 0.5)


def test_cache_returns_equal_fresh_lists(gpu: DeviceType) -> None:
    device = Device(id="n0.0", type=gpu, node="n0", index=0)
    model = AnalyticalCompute()
    first = model.layer_costs(GRAPH, device, batch=4)
    first.clear()
    again = model.layer_costs(GRAPH, device, batch=4)
    assert len(again) == 2
    assert again == AnalyticalCompute().layer_costs(GRAPH, device, batch=4)
    other = model.layer_costs(GRAPH, dataclasses.replace(device, speed=0.25), batch=4)
    assert other[0].fwd_s == pytest.approx(4 * again[0].fwd_s)


def test_gpipe_eq_6_1() -> None:
    assert gpipe_compute_time(8.0, 4, 1) == pytest.approx(8.0)  # no concurrency
    assert gpipe_compute_time(8.0, 4, 4) == pytest.approx(8.0 * 7 / 16)
