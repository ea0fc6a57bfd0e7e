"""Zoo models against published parameter counts and closed-form FLOPs."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from hetplan.graph import (
    ZOO,
    build_graph,
    build_module,
    loss_function,
    resolve_model,
    synthetic_batch,
)

# Published figures: torchvision model cards (ResNet, VGG, MobileNetV2, AlexNet),
# kuangliu/pytorch-cifar (CIFAR variants), nanoGPT (GPT-2 incl. position embeddings),
# BERT-base by hand: embeddings 23,837,184 + 12 x 7,087,872 + pooler 590,592 + classifier 1,538.
PARAMS = [
    ("resnet18", "imagenet", 11_689_512),
    ("resnet50", "imagenet", 25_557_032),
    ("vgg16", "imagenet", 138_357_544),
    ("mobilenetv2", "imagenet", 3_504_872),
    ("alexnet", "imagenet", 61_100_840),
    ("resnet18", "cifar10", 11_173_962),
    ("vgg16", "cifar10", 14_728_266),
    ("gpt2", None, 124_439_808),
    ("bert-base", None, 109_483_778),
]


@pytest.mark.parametrize(("name", "dataset", "expected"), PARAMS)
def test_published_parameter_counts(name: str, dataset: str | None, expected: int) -> None:
    assert build_graph(name, dataset).total_params == expected


def test_resnet50_forward_flops_and_layers() -> None:
    g = build_graph("resnet50", "imagenet")
    # 4.09 GMACs per image (torchvision), FlopCounterMode counts a multiply-add as 2.
    assert g.total_fwd_flops == pytest.approx(8.2e9, rel=0.05)
    assert g.input_shape == (3, 224, 224) and g.input_bytes == 3 * 224 * 224 * 4
    names = [layer.name for layer in g.layers]
    assert names[0] == "stem" and names[-2:] == ["pool", "head"] and len(names) == 19
    assert g.layers[-1].out_bytes == 1000 * 4
    assert g.cut_bytes[0] == 64 * 56 * 56 * 4  # stem output after max-pool


def gpt_fwd_flops(layers: int, hidden: int, seq: int, vocab: int) -> int:
    """Per sample: 12H^2 weights per block (2 FLOPs each per token), QK^T and AV (2*2*T^2*H,
    half of it under the causal mask: ``ops.CAUSAL_ATTENTION_SHARE``), and the LM head (2*H*V
    per token)."""
    per_block = 24 * hidden**2 * seq + 2 * seq**2 * hidden
    return layers * per_block + 2 * hidden * vocab * seq


def test_gpt_flops_match_closed_form() -> None:
    g = build_graph("gpt-tiny")
    assert g.total_fwd_flops == gpt_fwd_flops(4, 128, 64, 1000)
    block = g.layers[g.index("block0")]
    # Backward: weight matmuls cost 2x forward; flash-attention backward 2.5x (torch formula)
    # of the causal half.
    assert block.bwd_flops == 2 * 24 * 128**2 * 64 + 5 * 64**2 * 128
    assert [layer.name for layer in g.layers] == [
        "embed",
        "block0",
        "block1",
        "block2",
        "block3",
        "head",
    ]


def test_gpt2_xl_extracts_on_meta() -> None:
    g = build_graph("gpt2-xl")
    assert g.total_params == 1_557_611_200  # nanoGPT: 1558M
    assert g.total_fwd_flops == gpt_fwd_flops(48, 1600, 1024, 50257)
    assert g.cut_bytes == (1024 * 1600 * 4,) * 49  # one (T, H) fp32 activation per cut


def test_gpt_tied_embedding_counted_once_in_embed() -> None:
    built = resolve_model("gpt-tiny")
    module = build_module(built)
    assert module.head.lm_head.weight is module.embed.wte.weight
    g = build_graph("gpt-tiny")
    assert g.layers[0].params == 1000 * 128 + 64 * 128
    assert g.layers[-1].params == 2 * 128  # ln_f only


def test_transformer_options_change_the_shape() -> None:
    g = build_graph("gpt:layers=2,hidden=64,heads=4,seq=16,vocab=100")
    # embeddings 100*64 + 16*64, blocks 2 x (12H^2 + 13H), ln_f 2H.
    assert g.total_params == 7424 + 2 * (12 * 64**2 + 13 * 64) + 128
    assert g.input_shape == (16,) and g.input_bytes == 16 * 8
    assert len(g.layers) == 4


def test_bf16_halves_parameter_and_activation_bytes() -> None:
    f32, b16 = build_graph("gpt-tiny"), build_graph("gpt-tiny", dtype="bf16")
    assert b16.total_param_bytes * 2 == f32.total_param_bytes
    assert b16.cut_bytes[0] * 2 == f32.cut_bytes[0] == 64 * 128 * 4
    assert b16.input_bytes == f32.input_bytes  # token ids stay int64


@pytest.mark.parametrize("name", [n for n, e in ZOO.items() if e.family != "gpt"])
def test_every_model_is_a_sequence_of_named_children(name: str) -> None:
    with torch.device("meta"):
        module = resolve_model(name).factory()
    assert isinstance(module, nn.Sequential)
    assert all(not n.isdigit() for n, _ in module.named_children())


@pytest.mark.parametrize("name", ["resnet18", "vgg11", "mobilenetv2", "alexnet"])
@pytest.mark.parametrize(
    ("dataset", "channels", "classes"), [("mnist", 1, 10), ("highres", 3, 1000)]
)
def test_vision_models_take_every_dataset(
    name: str, dataset: str, channels: int, classes: int
) -> None:
    g = build_graph(name, dataset)
    assert g.input_shape[0] == channels
    assert g.layers[-1].out_bytes == classes * 4


def test_cifar_resnet_has_3x3_stem_without_maxpool() -> None:
    g = build_graph("resnet-tiny", "cifar10")
    stem = g.layers[0]
    assert stem.fwd_flops == 2 * 3 * 9 * 8 * 32 * 32  # 3x3 conv, 3->8 channels, 32x32 output
    assert stem.out_bytes == 8 * 32 * 32 * 4


def test_meta_trace_flops_equal_a_real_cpu_run() -> None:
    built = resolve_model("resnet-tiny", "cifar10")
    module = build_module(built, seed=0)
    x, _ = synthetic_batch(built, 3)
    with FlopCounterMode(display=False) as counter:
        module(x)
    assert counter.get_total_flops() == 3 * build_graph("resnet-tiny").total_fwd_flops


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "resnet-tiny"])
def test_real_build_is_seeded_and_trains(name: str) -> None:
    built = resolve_model(name)
    a, b = build_module(built, seed=3), build_module(built, seed=3)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)
    x, y = synthetic_batch(built, 2, seed=1)
    loss = loss_function(built)(a(x), y)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert all(p.grad is not None for p in a.parameters())


def test_lm_targets_are_next_tokens() -> None:
    built = resolve_model("gpt-tiny")
    x, y = synthetic_batch(built, 2)
    assert x.dtype == torch.long and y.shape == (2, 64)
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert int(x.max()) < 1000


@pytest.mark.parametrize(
    ("name", "dataset"), [("gpt-tiny", None), ("bert-tiny", None), ("resnet-tiny", "cifar10")]
)
def test_saved_bytes_match_a_real_cpu_run(name: str, dataset: str | None) -> None:
    """Storages autograd keeps in a real run (CPU flash attention) vs the meta trace."""
    built = resolve_model(name, dataset)
    module = build_module(built)
    x, y = synthetic_batch(built, 2)
    weights = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in weights:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_function(built)(module(x), y)
    traced = sum(layer.saved_bytes for layer in build_graph(name, dataset).layers)
    assert traced == pytest.approx(sum(kept.values()) / 2, rel=1e-3)
