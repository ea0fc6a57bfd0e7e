"""Our convolution FLOP count (``graph.conv_flops``): hand counts, torch's shapes and forward
count, and the traced graph (torch's counter overcounts grouped weight gradients)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from hetplan.graph import BuiltModel, build_graph
from hetplan.graph.conv_flops import (
    ConvArgs,
    conv_backward_flops,
    conv_forward_flops,
    output_size,
)
from hetplan.graph.extract import trace_graph

P1 = ConvArgs(stride=(1, 1), padding=(1, 1), dilation=(1, 1))
"""3x3 'same' convolution."""
S2 = ConvArgs(stride=(2, 2), padding=(1, 1), dilation=(1, 1))
"""3x3 convolution halving the size."""
ALL, NO_BIAS, WEIGHT_ONLY, INPUT_ONLY = (1, 1, 1), (1, 1, 0), (0, 1, 0), (1, 0, 0)
"""``output_mask`` (grad input, grad weight, grad bias)."""


def test_depthwise_3x3_stride_1() -> None:
    x, w, y = (2, 32, 16, 16), (32, 1, 3, 3), (2, 32, 16, 16)
    fwd = 2 * (2 * 32 * 16 * 16 * 9)  # 2 FLOPs x (N x C x out pixels x 9 taps, 1 channel each)
    assert fwd == 294_912
    assert conv_forward_flops(x, w, P1) == fwd
    assert conv_backward_flops(y, x, w, P1, NO_BIAS) == 2 * fwd  # grad input + grad weight
    assert conv_backward_flops(y, x, w, P1, WEIGHT_ONLY) == fwd  # first layer: no grad input
    assert conv_backward_flops(y, x, w, P1, INPUT_ONLY) == fwd
    assert conv_backward_flops(y, x, w, P1, ALL) == 2 * fwd + 2 * 32 * 16 * 16  # + bias sum


def test_depthwise_3x3_stride_2() -> None:
    x, w, y = (2, 32, 16, 16), (32, 1, 3, 3), (2, 32, 8, 8)
    assert output_size(16, 3, 0, S2) == (16 + 2 - 2 - 1) // 2 + 1 == 8
    fwd = 2 * (2 * 32 * 8 * 8 * 9)  # 73,728
    assert conv_forward_flops(x, w, S2) == fwd == 73_728
    assert conv_backward_flops(y, x, w, S2, NO_BIAS) == 2 * fwd
    assert conv_backward_flops(y, x, w, S2, ALL) == 2 * fwd + 2 * 32 * 8 * 8


def test_grouped_and_dense() -> None:
    x, y = (1, 16, 8, 8), (1, 32, 8, 8)
    grouped, dense = (32, 16 // 4, 3, 3), (32, 16, 3, 3)  # groups=4: 4 input channels each
    assert conv_forward_flops(x, grouped, P1) == 2 * 32 * 64 * 4 * 9 == 147_456
    assert conv_forward_flops(x, dense, P1) == 2 * 32 * 64 * 16 * 9 == 589_824
    assert conv_backward_flops(y, x, grouped, P1, ALL) == 2 * 147_456 + 32 * 64
    assert conv_backward_flops(y, x, dense, P1, NO_BIAS) == 2 * 589_824


def test_transposed_conv() -> None:
    # ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=g): 5x5 -> 10x10;
    # each of the 8 x 25 input elements meets 4/g output channels x 9 taps.
    args = ConvArgs(
        stride=(2, 2), padding=(1, 1), dilation=(1, 1), transposed=True, output_padding=(1, 1)
    )
    assert output_size(5, 3, 0, args) == (5 - 1) * 2 - 2 + 2 + 1 + 1 == 10
    x, y = (1, 8, 5, 5), (1, 4, 10, 10)
    assert conv_forward_flops(x, (8, 4, 3, 3), args) == 2 * 8 * 25 * 4 * 9 == 14_400
    assert conv_forward_flops(x, (8, 2, 3, 3), args) == 2 * 8 * 25 * 2 * 9  # groups=2
    assert conv_backward_flops(y, x, (8, 4, 3, 3), args, ALL) == 2 * 14_400 + 4 * 100


def test_conv1d_with_dilation() -> None:
    # Conv1d(4, 6, 5, stride=2, padding=3, dilation=2), length 20: the dilated kernel spans 9.
    args = ConvArgs(stride=(2,), padding=(3,), dilation=(2,))
    assert output_size(20, 5, 0, args) == (20 + 6 - 8 - 1) // 2 + 1 == 9
    x, w, y = (3, 4, 20), (6, 4, 5), (3, 6, 9)
    assert conv_forward_flops(x, w, args) == 2 * 3 * 6 * 9 * 4 * 5 == 6_480
    assert conv_backward_flops(y, x, w, args, WEIGHT_ONLY) == 6_480


ConvNd = nn.modules.conv._ConvNd

CONVS: dict[str, Callable[[], ConvNd]] = {
    "conv1d-dilated": lambda: nn.Conv1d(4, 6, 5, stride=2, padding=3, dilation=2),
    "depthwise-s2": lambda: nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32),
    "grouped-4": lambda: nn.Conv2d(16, 32, 3, padding=1, groups=4),
    "dense-mixed": lambda: nn.Conv2d(16, 32, 3, padding=(2, 0), dilation=(2, 1), stride=(1, 2)),
    "conv3d-grouped": lambda: nn.Conv3d(4, 8, 3, padding=1, groups=2),
    "transposed2d-grouped": lambda: nn.ConvTranspose2d(
        8, 4, 3, stride=2, padding=1, output_padding=1, groups=2
    ),
    "transposed1d": lambda: nn.ConvTranspose1d(6, 3, 4, stride=3),
}
SIZE = 7
"""Spatial size of the test inputs (odd: strides and dilations round)."""


def _args(conv: ConvNd) -> ConvArgs:
    return ConvArgs(
        stride=tuple(conv.stride),
        padding=tuple(int(p) for p in conv.padding),  # never "same" here
        dilation=tuple(conv.dilation),
        transposed=conv.transposed,
        output_padding=tuple(conv.output_padding),
    )


def _input(conv: ConvNd, grad: bool = False) -> torch.Tensor:
    return torch.randn(2, conv.in_channels, *[SIZE] * (conv.weight.dim() - 2), requires_grad=grad)


@pytest.mark.parametrize("make", CONVS.values(), ids=CONVS.keys())
def test_forward_matches_torch_shapes_and_forward_count(make: Callable[[], ConvNd]) -> None:
    """torch's forward count is right for groups (the weight shape carries ``Cin/groups``)."""
    conv = make()
    x = _input(conv)
    with FlopCounterMode(display=False) as counter:
        y = conv(x)
    args = _args(conv)
    if not args.transposed:
        kernel = conv.weight.shape[2:]
        sizes = tuple(output_size(SIZE, k, d, args) for d, k in enumerate(kernel))
        assert tuple(y.shape[2:]) == sizes
    assert conv_forward_flops(x.shape, conv.weight.shape, args) == counter.get_total_flops()


@pytest.mark.parametrize("make", CONVS.values(), ids=CONVS.keys())
def test_backward_agrees_with_torch_except_grouped_weight_grad(
    make: Callable[[], ConvNd],
) -> None:
    """Input and weight gradients, no bias (torch counts none): torch's count is ours plus the
    weight gradient over all ``Cin`` channels instead of ``Cin/groups`` (``groups - 1`` extra
    forwards)."""
    conv = make()
    conv.bias = None
    x = _input(conv, grad=True)
    y = conv(x)
    with FlopCounterMode(display=False) as counter:
        y.backward(torch.ones_like(y))
    args = _args(conv)
    fwd = conv_forward_flops(x.shape, conv.weight.shape, args)
    ours = conv_backward_flops(y.shape, x.shape, conv.weight.shape, args, NO_BIAS)
    assert ours == 2 * fwd
    assert counter.get_total_flops() == ours + (conv.groups - 1) * fwd


def _three_convs() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, 32, 1, bias=False),
        nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32, bias=False),
        nn.Conv2d(32, 16, 3, padding=1, groups=4),
    )


THREE_CONVS = BuiltModel(
    name="three-convs",
    family="custom",
    dataset=None,
    factory=_three_convs,  # built by the extractor, on the meta device
    input_shape=(3, 16, 16),
    input_dtype=torch.float32,
    task="regress",
    target_shape=(16, 8, 8),
    default_depth=1,
)


def test_traced_graph_counts_grouped_backward_right() -> None:
    point, depth, grouped = trace_graph(THREE_CONVS).layers
    # Per sample. Pointwise 3->32 on 16x16, fed with data: weight gradient only.
    assert point.fwd_flops == point.bwd_flops == 2 * 32 * 256 * 3 == 49_152
    # Depthwise 3x3 stride 2 -> 8x8: 9 taps of one channel; input and weight gradients.
    assert depth.fwd_flops == 2 * 32 * 64 * 9 == 36_864
    assert depth.bwd_flops == 2 * 36_864  # torch's counter: 33 x 36,864
    # 32->16 groups=4 (8 channels each) 8x8, with bias: + one add per grad_output element.
    assert grouped.fwd_flops == 2 * 16 * 64 * 8 * 9 == 147_456
    assert grouped.bwd_flops == 2 * 147_456 + 16 * 64
    assert [layer.fwd_conv_flops for layer in (point, depth, grouped)] == [49_152, 36_864, 147_456]
    assert grouped.bwd_conv_flops == grouped.bwd_flops  # the MSE loss counts no FLOPs


def test_mobilenetv2_backward_is_twice_forward_less_the_stem() -> None:
    """Every conv and the linear head cost 2x forward backward (input + weight gradients, each
    the forward's products); the stem conv, fed with data, computes no input gradient; BN,
    ReLU6, pooling and the loss count no FLOPs and the convs have no bias. So
    bwd = 2 fwd - stem, and the stem conv (3->32, 3x3, stride 2: 112^2 x 32 x 27 MACs) is 3.6%
    of the 300 MMAC forward: ratio 1.964 (torch's counter: 19.4, depthwise weight gradients
    counted dense). The band [1.9, 2.1] holds for any stem under 10% of the model."""
    g = build_graph("mobilenetv2", batch=2)
    fwd = g.total_fwd_flops
    bwd = sum(layer.bwd_flops for layer in g.layers)
    stem = g.layers[0].fwd_flops
    assert stem == 2 * 112 * 112 * 32 * 27
    assert bwd == 2 * fwd - stem
    assert bwd / fwd == pytest.approx(1.964, abs=0.001)
    assert 1.9 <= bwd / fwd <= 2.1
