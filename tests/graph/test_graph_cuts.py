"""Layer attribution and cut bytes on hand-made models with known answers."""

from __future__ import annotations

import torch
from torch import nn

from hetplan.graph import BuiltModel, build_graph, select_layers

F = 8  # features; one fp32 activation is 8 * 4 = 32 bytes per sample


class Skip(nn.Module):
    """a -> b -> c, plus skips: h (a's output) and the model input x go around to the end."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(F, F)
        self.b = nn.Linear(F, F)
        self.c = nn.Linear(F, F)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        y = self.b(h)
        return self.c(y) + h + x  # the adds run outside any layer, after c


def skip_model() -> BuiltModel:
    return BuiltModel(
        name="skip",
        family="custom",
        dataset=None,
        factory=Skip,
        input_shape=(F,),
        input_dtype=torch.float32,
        task="regress",
        target_shape=(F,),
    )


def test_skip_connections_cross_every_cut_they_span() -> None:
    g = build_graph(skip_model())
    assert [layer.name for layer in g.layers] == ["a", "b", "c"]
    # after a: h and x; after b: y, h and x.
    assert g.cut_bytes == (2 * 32, 3 * 32)


def test_skip_model_layer_figures() -> None:
    g = build_graph(skip_model(), batch=4)
    a, b, c = g.layers
    assert [layer.params for layer in g.layers] == [F * F + F] * 3
    assert a.param_tensor_bytes == (F * F * 4, F * 4)  # weight, bias in registration order
    assert [layer.fwd_flops for layer in g.layers] == [2 * F * F] * 3  # addmm: 2*in*out
    # backward: input gradient (2*F*F) for b and c, weight gradient (2*F*F) for all.
    assert (a.bwd_flops, b.bwd_flops, c.bwd_flops) == (2 * F * F, 4 * F * F, 4 * F * F)
    assert [layer.out_bytes for layer in g.layers] == [32] * 3
    # addmm saves its input (x, h, y); the loss saves its input and the target.
    assert (a.saved_bytes, b.saved_bytes, c.saved_bytes) == (32, 32, 32 + 32 + 32)
    assert a.fwd_kernels == 1 and c.fwd_kernels == 1 + 2 + 1  # addmm, two adds, mse_loss


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(F, F), nn.ReLU())
        self.leaf = nn.Linear(F, F)
        self.unused = nn.Linear(F, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.leaf(self.block(x))
        return out


def test_depth_selects_children_and_keeps_leaves_whole() -> None:
    names = [n for n, _ in select_layers(Nested(), 2)]
    assert names == ["block.0", "block.1", "leaf", "unused"]
    assert [n for n, _ in select_layers(Nested(), 1)] == ["block", "leaf", "unused"]


def test_unexecuted_layers_are_dropped_with_a_note() -> None:
    built = BuiltModel(
        name="nested",
        family="custom",
        dataset=None,
        factory=Nested,
        input_shape=(F,),
        input_dtype=torch.float32,
        task="regress",
        target_shape=(F,),
    )
    g = build_graph(built, depth=2)
    assert [layer.name for layer in g.layers] == ["block.0", "block.1", "leaf"]
    assert g.cut_bytes == (32, 32)
    assert any("unused" in note for note in g.notes)
    assert g.total_params == 2 * (F * F + F) + (F + 1)  # unused params counted in layer 0


def test_cut_inside_a_residual_block_includes_the_skip() -> None:
    g = build_graph("resnet-tiny", "cifar10", depth=2)
    act = 8 * 32 * 32 * 4  # one stage-1 activation
    i = g.index("layer1_0.conv1")
    assert g.cut_bytes[i - 1] == act  # block input only
    assert g.cut_bytes[i] == 2 * act  # conv1 output + the skip (block input)
    assert g.cut_bytes[g.index("layer1_0.downsample")] == act  # after the add: one tensor
    assert any("layer1_0.relu" in note for note in g.notes)  # ReLU module runs twice
