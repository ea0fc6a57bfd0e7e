"""Convolution FLOPs are split out of each layer's FLOPs (priced at TF32 in fp32 on GPUs)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hetplan.graph import BuiltModel, LayerInfo, resolve_model
from hetplan.graph.extract import trace_graph
from hetplan.serde import from_data, to_data


@pytest.mark.parametrize(("name", "dataset"), [("resnet-tiny", None), ("vgg11", "cifar10")])
def test_cnn_flops_are_conv_except_the_head(name: str, dataset: str | None) -> None:
    graph = trace_graph(resolve_model(name, dataset))
    *body, head = graph.layers
    for layer in body:  # convs (BN, ReLU and pooling count no FLOPs), or pools with none
        assert layer.fwd_conv_flops == layer.fwd_flops, layer.name
        assert layer.bwd_conv_flops == layer.bwd_flops, layer.name
    assert sum(layer.fwd_conv_flops for layer in body) > 0
    assert head.fwd_flops > 0  # the linear classifier
    assert head.fwd_conv_flops == 0
    assert head.bwd_conv_flops == 0


def test_transformer_has_no_conv_flops() -> None:
    graph = trace_graph(resolve_model("gpt-tiny"))
    assert graph.total_fwd_flops > 0
    assert all(layer.fwd_conv_flops == layer.bwd_conv_flops == 0 for layer in graph.layers)


class ConvLinear(nn.Module):
    """conv1 (input needs no gradient) -> conv2 -> linear, all in one layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv2(torch.relu(self.conv1(x))).flatten(1))


def test_conv_and_linear_split_exactly() -> None:
    built = BuiltModel(
        name="conv-linear",
        family="custom",
        dataset=None,
        factory=lambda: nn.Sequential(ConvLinear()),
        input_shape=(3, 8, 8),
        input_dtype=torch.float32,
        task="regress",
        target_shape=(10,),
        default_depth=1,
    )
    (layer,) = trace_graph(built).layers
    # Per sample, a multiply-add = 2 FLOPs; 8x8 outputs, 3x3 kernels, biases not counted.
    conv1 = 2 * 4 * 64 * 3 * 9  # 13,824
    conv2 = 2 * 4 * 64 * 4 * 9  # 18,432
    fc = 2 * 256 * 10  # 5,120
    assert layer.fwd_flops == conv1 + conv2 + fc
    assert layer.fwd_conv_flops == conv1 + conv2
    # Backward: conv1 only its weight gradient (input is data); conv2 and fc both gradients;
    # each conv's bias gradient sums its 4 x 8x8 output gradient (graph.conv_flops: one add
    # per element; torch's counter counts none, nor does it for the linear's bias).
    bias = 4 * 64  # 256
    assert layer.bwd_flops == conv1 + 2 * conv2 + 2 * fc + 2 * bias
    assert layer.bwd_conv_flops == conv1 + 2 * conv2 + 2 * bias


def test_old_layer_json_loads_with_zero_conv_flops() -> None:
    layer = LayerInfo(
        name="l",
        fwd_flops=1.0,
        bwd_flops=2.0,
        params=0,
        param_bytes=0,
        out_bytes=4,
        saved_bytes=0,
        fwd_io_bytes=8,
        bwd_io_bytes=8,
    )
    data = to_data(layer)
    assert isinstance(data, dict)
    del data["fwd_conv_flops"], data["bwd_conv_flops"]
    loaded = from_data(LayerInfo, data, "old.json")
    assert loaded == layer
    assert loaded.fwd_conv_flops == loaded.bwd_conv_flops == 0.0
