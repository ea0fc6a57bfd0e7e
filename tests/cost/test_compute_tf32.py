"""fp32 convolution FLOPs priced at the TF32 peak (PyTorch's cuDNN default)."""

from __future__ import annotations

import dataclasses

import pytest

from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.compute import CONV_TF32_DEFAULT, MATMUL_TF32_DEFAULT, AnalyticalCompute
from hetplan.graph.types import LayerInfo, ModelGraph


def layer(name: str, flops: float, conv: float) -> LayerInfo:
    """Compute-bound: fwd ``flops``, bwd twice that; no bytes, no kernels."""
    return LayerInfo(
        name=name,
        fwd_flops=flops,
        bwd_flops=2 * flops,
        fwd_conv_flops=conv,
        bwd_conv_flops=2 * conv,
        params=0,
        param_bytes=0,
        out_bytes=0,
        saved_bytes=0,
        fwd_io_bytes=0,
        bwd_io_bytes=0,
    )


GRAPH = ModelGraph(
    name="toy",
    input_shape=(1,),
    input_bytes=4,
    dtype="fp32",
    layers=(layer("conv", 1e9, 1e9), layer("mixed", 1e9, 6e8), layer("gemm", 1e9, 0.0)),
    cut_bytes=(0, 0),
)


@pytest.fixture
def tc(gpu: DeviceType) -> Device:
    """1 TFLOP/s fp32, 8 TFLOP/s tf32, 4 TFLOP/s fp16; efficiency 1."""
    t = dataclasses.replace(gpu, peak_flops={"fp32": 1e12, "tf32": 8e12, "fp16": 4e12})
    return Device(id="n0.0", type=t, node="n0", index=0)


def fwd_bwd(model: AnalyticalCompute, device: Device) -> list[tuple[float, float]]:
    return [(c.fwd_s, c.bwd_s) for c in model.layer_costs(GRAPH, device, batch=2)]


def test_pytorch_defaults() -> None:
    assert CONV_TF32_DEFAULT is True
    assert MATMUL_TF32_DEFAULT is False


def test_fp32_convs_at_tf32_peak(tc: Device) -> None:
    conv, mixed, gemm = fwd_bwd(AnalyticalCompute("fp32"), tc)
    assert conv == pytest.approx((2e9 / 8e12, 4e9 / 8e12))
    # 2 samples: 1.2e9 conv FLOPs at 8e12 + 0.8e9 others at 1e12 (backward twice that).
    assert mixed == pytest.approx((1.2e9 / 8e12 + 0.8e9 / 1e12, 2 * (1.2e9 / 8e12 + 0.8e9 / 1e12)))
    assert gemm == pytest.approx((2e9 / 1e12, 4e9 / 1e12))


def test_matmul_tf32_prices_the_rest_at_tf32(tc: Device) -> None:
    times = fwd_bwd(AnalyticalCompute("fp32", matmul_tf32=True), tc)
    assert times == [pytest.approx((2e9 / 8e12, 4e9 / 8e12))] * 3


def test_fp16_unchanged(tc: Device) -> None:
    times = fwd_bwd(AnalyticalCompute("fp16"), tc)
    assert times == [pytest.approx((2e9 / 4e12, 4e9 / 4e12))] * 3


def test_off_or_no_tf32_peak_is_plain_fp32(tc: Device, gpu: DeviceType) -> None:
    plain = [pytest.approx((2e9 / 1e12, 4e9 / 1e12))] * 3
    assert fwd_bwd(AnalyticalCompute("fp32", conv_tf32=False), tc) == plain
    cpu = Device(id="n0.0", type=gpu, node="n0", index=0)  # fp32 and fp16 peaks only
    assert "tf32" not in gpu.peak_flops
    assert fwd_bwd(AnalyticalCompute("fp32"), cpu) == plain


def test_memory_bound_layer_keeps_the_memory_term(tc: Device) -> None:
    # 1e9 B per sample at 100 GB/s = 20 ms for 2 samples > any compute term above.
    slow = dataclasses.replace(GRAPH.layers[0], fwd_io_bytes=10**9)
    graph = dataclasses.replace(GRAPH, layers=(slow,), cut_bytes=())
    (cost,) = AnalyticalCompute("fp32").layer_costs(graph, tc, batch=2)
    assert cost.fwd_s == pytest.approx(2e9 / 1e11)
    assert cost.bwd_s == pytest.approx(4e9 / 8e12)


def test_cache_tells_tf32_peaks_apart(tc: Device) -> None:
    model = AnalyticalCompute("fp32")
    fast = model.layer_costs(GRAPH, tc, batch=2)[0].fwd_s
    peaks = {**tc.type.peak_flops, "tf32": 2e12}
    slower = dataclasses.replace(tc, type=dataclasses.replace(tc.type, peak_flops=peaks))
    assert model.layer_costs(GRAPH, slower, batch=2)[0].fwd_s == pytest.approx(4 * fast)
