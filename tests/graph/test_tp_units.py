"""Tensor-parallel units are found from structure and accepted only if their shards, run in one
process and all-reduced, compute what the unsharded module does."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from hetplan.graph import build_module, resolve_model, select_layers, synthetic_batch
from hetplan.graph.meta import build_on_meta
from hetplan.graph.tp_units import (
    FUSED_QKV,
    TpUnit,
    VocabPair,
    check_tp_units,
    find_tp_units,
    find_vocab_pair,
    split_count,
    tp_layout,
)

D, HEADS = 64, 4


@functools.cache
def _zoo(name: str) -> nn.Module:
    return build_module(resolve_model(name, None), "cpu", seed=0)


def _layers(model: nn.Module, depth: int = 1) -> list[str]:
    return [name for name, _ in select_layers(model, depth)]


def _gpt_units(i: int) -> list[TpUnit]:
    p = f"block{i}"
    return [
        TpUnit(
            kind="attention",
            module=f"{p}.attn",
            colwise=(f"{p}.attn.q", f"{p}.attn.k", f"{p}.attn.v"),
            rowwise=(f"{p}.attn.c_proj",),
        ),
        TpUnit(kind="mlp", module=f"{p}.mlp", colwise=(f"{p}.mlp.0",), rowwise=(f"{p}.mlp.2",)),
    ]


# --- hand-written modules ----------------------------------------------------------------------


class FusedAttention(nn.Module):
    """The former zoo GPT attention: one Linear for q, k and v, split in three."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = HEADS
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return out


class LlamaAttention(nn.Module):
    """Separate wq/wk/wv/wo, softmax of a matmul, and the head count baked into the view."""

    def __init__(self, literal_heads: bool = False) -> None:
        super().__init__()
        self.n_heads, self.head_dim = HEADS, D // HEADS
        self.literal_heads = literal_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        heads = HEADS if self.literal_heads else self.n_heads
        q, k, v = (
            w(x).view(b, t, heads, -1).transpose(1, 2) if self.literal_heads
            else w(x).view(b, t, heads, self.head_dim).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )  # fmt: skip
        scores = torch.softmax(q @ k.transpose(-1, -2) / self.head_dim**0.5, dim=-1)
        out: torch.Tensor = self.wo((scores @ v).transpose(1, 2).reshape(b, t, -1))
        return out


class SwiGLU(nn.Module):
    def __init__(self, hidden: int = 172) -> None:
        super().__init__()
        self.w1 = nn.Linear(D, hidden, bias=False)
        self.w3 = nn.Linear(D, hidden, bias=False)
        self.w2 = nn.Linear(hidden, D, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class LlamaBlock(nn.Module):
    def __init__(self, attention: nn.Module | None = None) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(D)
        self.attention = attention if attention is not None else LlamaAttention()
        self.ffn_norm = nn.LayerNorm(D)
        self.feed_forward = SwiGLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        out: torch.Tensor = x + self.feed_forward(self.ffn_norm(x))
        return out


def _model(*blocks: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*blocks)


# --- zoo GPT -----------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
def test_every_gpt_block_is_an_attention_and_an_mlp_unit(depth: int) -> None:
    model = _zoo("gpt-tiny")
    units = find_tp_units(model, _layers(model, depth))
    assert units == [u for i in range(4) for u in _gpt_units(i)]


@pytest.mark.parametrize("tp", [2, 4])
def test_gpt_units_are_ready_and_the_tied_vocabulary_splits(tp: int) -> None:
    model = _zoo("gpt-tiny")
    layout = tp_layout(model, _layers(model), tp)
    assert layout.refused == ()
    assert list(layout.units) == [u for i in range(4) for u in _gpt_units(i)]
    assert all(u.head_attr is None for u in layout.units)
    assert layout.vocab == VocabPair(embedding="embed.wte", head="head.lm_head", tied=True)


def test_gpt_vocabulary_pair_is_tied() -> None:
    model = _zoo("gpt-tiny")
    pair = find_vocab_pair(model)
    assert pair == VocabPair(embedding="embed.wte", head="head.lm_head", tied=True)
    assert model.get_submodule("head.lm_head").weight is model.get_submodule("embed.wte").weight


def test_sharded_params_name_each_split_tensor_and_its_dim() -> None:
    model = _zoo("gpt-tiny")
    sharded = tp_layout(model, _layers(model), 2).sharded_params()
    block0 = {k: v for k, v in sharded.items() if k.startswith("block0.")}
    assert block0 == {
        **{f"block0.attn.{p}.{t}": 0 for p in "qkv" for t in ("weight", "bias")},
        "block0.attn.c_proj.weight": 1,  # its bias is added once, after the all-reduce
        "block0.mlp.0.weight": 0,
        "block0.mlp.0.bias": 0,
        "block0.mlp.2.weight": 1,
    }
    assert sharded["embed.wte.weight"] == 0
    assert sharded["head.lm_head.weight"] == 0  # the same tensor, under the head's name
    assert "head.lm_head.bias" not in sharded  # the head has no bias
    params = dict(model.named_parameters(remove_duplicate=False))
    assert set(sharded) <= set(params)
    for name, dim in sharded.items():
        assert params[name].shape[dim] % 2 == 0


def test_gpt_block_shards_sum_to_the_unsharded_block() -> None:
    """An independent emulation of tp=2 (slice the real weights, all-reduce by summing) gives
    block0's own output, for the units check_tp_units accepts on the model's real input."""
    built = resolve_model("gpt-tiny", None)
    model = _zoo("gpt-tiny")
    tokens, _ = synthetic_batch(built, 2, "cpu", seed=1)
    units = find_tp_units(model, _layers(model))
    ready, refused = check_tp_units(model, units, 2, sample=(tokens[:, :16],))
    assert (ready, refused) == (units, [])
    block = model.get_submodule("block0")
    x = torch.randn(2, 16, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = block(x)
        h = x + _all_reduced(block.attn, ready[0], "block0.attn", block.ln_1(x), 2)
        got = h + _all_reduced(block.mlp, ready[1], "block0.mlp", block.ln_2(h), 2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _all_reduced(
    module: nn.Module, unit: TpUnit, prefix: str, x: torch.Tensor, tp: int
) -> torch.Tensor:
    total = torch.zeros(())
    for r in range(tp):
        shard = copy.deepcopy(module)
        for fqn in unit.colwise:
            lin = shard.get_submodule(fqn.removeprefix(prefix + "."))
            n = lin.out_features // tp
            lin.weight = nn.Parameter(lin.weight[r * n : (r + 1) * n])
            lin.bias = nn.Parameter(lin.bias[r * n : (r + 1) * n])
        for fqn in unit.rowwise:
            lin = shard.get_submodule(fqn.removeprefix(prefix + "."))
            n = lin.in_features // tp
            lin.weight = nn.Parameter(lin.weight[:, r * n : (r + 1) * n])
            lin.bias = nn.Parameter(lin.bias if r == 0 else torch.zeros_like(lin.bias))
        total = total + shard(x)
    return total


def test_features_not_divisible_by_tp_are_refused() -> None:
    model = _zoo("gpt-tiny")
    layout = tp_layout(model, _layers(model), 3)
    assert layout.units == ()
    assert layout.vocab is None  # 1000 tokens
    assert "block0.attn: block0.attn.q has 128 output features, not divisible by tp=3" in (
        layout.refused
    )


def test_a_meta_model_is_found_but_cannot_be_checked() -> None:
    model = build_on_meta(resolve_model("gpt-tiny", None).factory)
    units = find_tp_units(model, _layers(model))
    assert len(units) == 8
    ready, refused = check_tp_units(model, units, 2)
    assert ready == []
    assert len(refused) == 8
    assert all("meta device" in why and "real tensors" in why for why in refused)


# --- BERT ------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
def test_bert_ffns_are_units_and_multihead_attention_is_not(depth: int) -> None:
    model = _zoo("bert-tiny")
    units = find_tp_units(model, _layers(model, depth))
    assert units == [
        TpUnit(kind="mlp", module=f"layer{i}.ffn", colwise=(f"layer{i}.ffn.0",),
               rowwise=(f"layer{i}.ffn.2",))
        for i in range(2)
    ]  # fmt: skip
    tokens, _ = synthetic_batch(resolve_model("bert-tiny", None), 2, "cpu")
    assert check_tp_units(model, units, 2, sample=(tokens,)) == (units, [])


def test_bert_vocabulary_has_no_head() -> None:
    model = _zoo("bert-tiny")
    assert find_vocab_pair(model) == VocabPair(embedding="embed.word", head=None, tied=False)
    assert tp_layout(model, _layers(model), 2).vocab is not None
    assert tp_layout(model, _layers(model), 4).vocab is None  # 30522 tokens


# --- hand-written structures -------------------------------------------------------------------


def test_fused_qkv_attention_is_refused_with_the_reason() -> None:
    model = _model(FusedAttention())
    units = find_tp_units(model, ["0"])
    assert units == [
        TpUnit(kind="attention", module="0", colwise=("0.c_attn",), rowwise=("0.c_proj",))
    ]
    assert check_tp_units(model, units, 2) == ([], [f"0: {FUSED_QKV}"])
    assert "split it into three Linear layers" in FUSED_QKV


def test_llama_block_needs_its_head_count_divided() -> None:
    model = _model(LlamaBlock())
    units = find_tp_units(model, ["0"])
    assert units == [
        TpUnit(
            kind="attention",
            module="0.attention",
            colwise=("0.attention.wq", "0.attention.wk", "0.attention.wv"),
            rowwise=("0.attention.wo",),
        ),
        TpUnit(
            kind="mlp",
            module="0.feed_forward",
            colwise=("0.feed_forward.w1", "0.feed_forward.w3"),
            rowwise=("0.feed_forward.w2",),
        ),
    ]
    ready, refused = check_tp_units(model, units, 2)
    assert refused == []
    assert [u.head_attr for u in ready] == ["n_heads", None]
    assert model.get_submodule("0.attention").n_heads == HEADS  # the model is unchanged


def test_attention_wrong_on_local_shards_is_refused() -> None:
    """A literal head count runs on local shapes but mixes heads; a zero-initialised output
    projection would hide it from a check on the model's own weights."""
    attention = LlamaAttention(literal_heads=True)
    nn.init.zeros_(attention.wo.weight)
    model = _model(LlamaBlock(attention))
    units = find_tp_units(model, ["0"])
    ready, refused = check_tp_units(model, units, 2)
    assert [u.kind for u in ready] == ["mlp"]
    assert len(refused) == 1
    assert refused[0].startswith("0.attention: attention not ready for tp=2 (the sharded result")


def test_mlp_not_returning_to_its_input_width_is_no_unit() -> None:
    model = _model(nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D // 2)))
    assert find_tp_units(model, ["0"]) == []


def test_a_unit_cut_by_a_layer_boundary_is_not_returned() -> None:
    mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    assert find_tp_units(mlp, ["0", "1", "2"]) == []
    whole = find_tp_units(mlp, [""])
    assert whole == [TpUnit(kind="mlp", module="", colwise=("0",), rowwise=("2",))]
    block = _model(LlamaBlock())
    layers = [name for name, _ in select_layers(block, 3)]  # attention cut into its Linears
    assert "0.attention.wq" in layers
    assert [u.module for u in find_tp_units(block, layers)] == []


def test_the_check_is_deterministic() -> None:
    model = _model(LlamaBlock(LlamaAttention(literal_heads=True)))
    units = find_tp_units(model, ["0"])
    assert check_tp_units(model, units, 2) == check_tp_units(model, units, 2)


# --- what a degree must divide (structure only) -------------------------------------------------


def test_split_count_is_heads_for_attention_and_width_for_mlps() -> None:
    gpt = _zoo("gpt-tiny")
    attn, mlp = _gpt_units(0)
    assert split_count(gpt, attn) == 4  # view(b, t, -1, head_dim): 128 / 32 heads
    assert split_count(gpt, mlp) == 512
    llama = _model(LlamaBlock())
    att, ffn = find_tp_units(llama, ["0"])
    assert split_count(llama, att) == HEADS  # view(b, t, n_heads, head_dim)
    assert split_count(llama, ffn) == 172
    literal = _model(LlamaBlock(LlamaAttention(literal_heads=True)))
    assert split_count(literal, find_tp_units(literal, ["0"])[0]) == HEADS  # view(b, t, 4, -1)
    fused = _model(FusedAttention())
    assert split_count(fused, find_tp_units(fused, ["0"])[0]) == 0  # never split


def test_split_count_works_on_meta() -> None:
    built = resolve_model("gpt-tiny", None)
    with torch.device("meta"):
        meta = build_on_meta(built.factory)
    assert [split_count(meta, u) for u in find_tp_units(meta, ["block0"])] == [4, 512]
