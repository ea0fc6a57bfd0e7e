"""Convolutions placed among the calibration's 3x3 probe families by their GEMM's shape."""

from __future__ import annotations

import math

import pytest
import torch

from hetplan.graph import build_graph
from hetplan.graph.ops import conv_probe_intensity
from hetplan.planspec import ModelRef

CONV = torch.ops.aten.convolution.default


def intensity(c_in: int, c_out: int, k: int, dtype: torch.dtype, groups: int = 1) -> float:
    x = torch.empty(2, c_in, 16, 16, dtype=dtype, device="meta")
    w = torch.empty(c_out, c_in // groups, k, k, dtype=dtype, device="meta")
    args = (x, w, None, [1, 1], [k // 2, k // 2], [1, 1], False, [0, 0], groups)
    return conv_probe_intensity(CONV, args, {})


def test_a_3x3_convolution_of_c_channels_is_the_probe_of_c_channels() -> None:
    # The probe of C channels moves 9 C / element-size FLOPs per byte (profile.calibrate._conv:
    # 2 n C^2 9 HW FLOPs over 2 n C HW elements).
    assert intensity(64, 64, 3, torch.bfloat16) == pytest.approx(9 * 64 / 2)
    assert intensity(128, 128, 3, torch.float32) == pytest.approx(9 * 128 / 4)


def test_a_1x1_convolution_is_placed_by_its_gemm_not_its_bytes() -> None:
    # 256 -> 64, 1x1, bf16: N = 64, K = 256, C = sqrt(64 * 256 / 9) = 42.67 -> 9 C / 2 = 192.
    # Its own FLOPs per byte are 2 * 256 * 64 / (320 * 2) = 51.2: a probe of 11 channels.
    assert intensity(256, 64, 1, torch.bfloat16) == pytest.approx(9 * math.sqrt(64 * 256 / 9) / 2)


def test_a_grouped_convolution_counts_per_group() -> None:
    # 64 -> 64 in 4 groups, 3x3: N = 16, K = 16 * 9 -> C = 16.
    assert intensity(64, 64, 3, torch.float32, groups=4) == pytest.approx(9 * 16 / 4)


def test_the_graph_records_it_for_its_convolution_classes_only() -> None:
    graph = build_graph(ModelRef(name="resnet-tiny", dataset="cifar10"))
    conv = [w for layer in graph.layers for w in layer.work if w.op_class == "conv"]
    other = [w for layer in graph.layers for w in layer.work if w.op_class != "conv"]
    assert conv and all(w.probe_intensity > 0 for w in conv)
    assert all(w.probe_intensity == 0 for w in other)
    # resnet-tiny's blocks are 3x3 convolutions of 8 -> 8 channels in fp32: 9 * 8 / 4 = 18.
    block = next(layer for layer in graph.layers if layer.name == "layer1_0")
    fwd = next(w for w in block.work if w.op_class == "conv" and not w.backward)
    assert fwd.probe_intensity == pytest.approx(18.0)
