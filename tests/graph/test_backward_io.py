"""Backward I/O bytes leave out parameter gradients, and only them.

The tracer excludes a parameter's gradient from ``bwd_io_bytes`` (batch-independent traffic,
priced from ``param_bytes``). It once also excluded every backward tensor that merely shared a
*shape* with a weight gradient: in gpt-tiny (traced at batch 2, sequence 64, hidden 128) the
(batch * seq, hidden) = (128, 128) activation gradients look like a (128, 128) weight gradient,
and a block's backward I/O came out 38x too small. Here: the figures by hand, their
independence from the traced batch, and tied weights (whose partial gradients must still be
left out).

Byte counts by hand follow the tracer's rule (``extract`` docstring): every tensor argument
and result of every backward kernel once, less parameters, buffers and parameter gradients;
fp32 is 4 bytes, token ids (int64) 8.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hetplan.graph import BuiltModel, build_graph
from hetplan.graph.extract import trace_graph
from hetplan.graph.trace import BwdOp, TraceState
from hetplan.graph.types import LayerInfo, ModelGraph

F32, I64 = 4, 8
IO_ROUNDING = 1.0  # per-class I/O bytes are not rounded up to whole bytes (test_op_work)

# gpt-tiny (hetplan.graph.zoo.gpt), traced at build_graph's default batch.
BATCH, SEQ, HIDDEN, HEADS, VOCAB, BLOCKS = 2, 64, 128, 4, 1000, 4
TOKENS = BATCH * SEQ
ACT = TOKENS * HIDDEN * F32
"""One (batch, seq, hidden) fp32 activation or gradient, in bytes."""


def _blocks(graph: ModelGraph) -> list[LayerInfo]:
    blocks = [layer for layer in graph.layers if layer.name.startswith("block")]
    assert len(blocks) == BLOCKS
    return blocks


def _bwd_work(layer: LayerInfo) -> float:
    return sum(w.io_bytes for w in layer.work if w.backward)


# -- gpt-tiny -------------------------------------------------------------------------------


def test_gpt_tiny_block_backward_io_by_hand() -> None:
    """A block's backward in units of ACT (the traced batch's (B, T, H) fp32 tensor), from its
    kernels (MLP width 4H; q, k, v separate H x H projections):

    ======================================  ====  ======================================
    MLP down-projection                     11    grad-input mm 1+4, weight mm 1+4, bias 1
    GELU backward                           12    reads grad and input (4+4), writes 4
    MLP up-projection                       13    grad-input mm 4+1, weight mm 4+1, bias 4
    LayerNorm backward (x2)                  6    reads grad and input, writes 1 (each)
    residual gradient adds (x2)              6    1+1 -> 1 (each)
    attention output projection              5    grad-input mm 1+1, weight mm 1+1, bias 1
    flash attention backward                 8    reads dO, q, k, v, O; writes dq, dk, dv
    q, k, v projections                     15    5 each, as the output projection
    sums of the q, k, v input gradients      6    two adds
    ======================================  ====  ======================================

    83 ACT in all, besides small per-row tensors: each LayerNorm's mean and rstd (B, T, 1),
    the attention's log-sum-exp (B, heads, T) and its RNG seed and offset. The forward moves
    40 ACT; so bwd/fwd is about 2.07. Weight gradients (mm and sum results, AccumulateGrad's
    copies) count nothing, though the (128, 128) weight gradients share the 2-D activation
    gradients' shape.
    """
    per_row = 2 * 2 * TOKENS * F32 + BATCH * HEADS * SEQ * F32
    for block in _blocks(build_graph("gpt-tiny")):
        extra = block.bwd_io_bytes * BATCH - 83 * ACT
        assert 0 <= extra <= per_row + 64, block.name  # 64: the RNG state and rounding


def test_gpt_tiny_block_backward_io_within_band_of_forward() -> None:
    """Structural band: every forward kernel's backward reads its output's gradient and what
    it saved and writes its inputs' gradients (an elementwise op: 2 reads + 1 write for
    1 + 1, so 1.5x), and a matmul's backward moves twice its forward (grad-input and weight
    matmuls each re-read the output gradient and one operand); forward residual adds are
    free in backward but gradients meeting at a fork are summed at the same cost. So a block's
    backward moves between 1.5x and 2.5x its forward (2.07x measured; the shape-coincidence
    bug gave 0.027x)."""
    for block in _blocks(build_graph("gpt-tiny")):
        assert 1.5 * block.fwd_io_bytes <= block.bwd_io_bytes <= 2.5 * block.fwd_io_bytes
        assert _bwd_work(block) == pytest.approx(block.bwd_io_bytes, rel=0, abs=IO_ROUNDING)


def test_gpt_tiny_every_layer_backward_classes_add_up() -> None:
    for layer in build_graph("gpt-tiny").layers:
        assert _bwd_work(layer) == pytest.approx(layer.bwd_io_bytes, rel=0, abs=IO_ROUNDING)


def test_gpt_tiny_backward_io_per_sample_is_batch_independent() -> None:
    """At batch 3 the 2-D activation gradients are (192, 128), no weight's shape: per-sample
    figures must agree with batch 2's, but for a few scalars (the attention's RNG state, the
    loss's) divided by the batch. Not the embedding's: the position embedding's gradient,
    summed over the batch, is a (T, H) tensor per step (as its lookup is in the forward)."""
    two, three = build_graph("gpt-tiny"), build_graph("gpt-tiny", batch=3)
    for a, b in zip(two.layers[1:], three.layers[1:], strict=True):
        assert a.bwd_io_bytes == pytest.approx(b.bwd_io_bytes, rel=0, abs=16), a.name


def test_gpt_tiny_tied_embedding_gradient_is_left_out() -> None:
    """``head.lm_head.weight`` is ``embed.wte.weight``: the head's weight-gradient matmul makes
    a partial (vocab, hidden) gradient, the embedding backward the other, and autograd adds
    them; neither partial nor the sum counts.

    * embed: the position embedding's batch sum reads ACT and writes (T, H), whose embedding
      backward reads it and the T position ids; the token embedding backward reads ACT and
      the B * T token ids.
    * head: loss (ones_like 4+4 bytes; nll_loss backward reads its scalar gradient and total
      weight, the (N, V) log-probabilities and N targets, writes (N, V); log-softmax backward
      reads two (N, V), writes one), lm_head (grad-input mm: (N, V) in, (N, H) out; weight
      mm: (N, V) and (N, H) in, the partial out, left out), ln_f (3 ACT and mean, rstd).
    """
    graph = build_graph("gpt-tiny")
    embed, head = graph.layers[0], graph.layers[-1]
    ids = TOKENS * I64 + SEQ * I64
    embed_bytes = ACT + SEQ * HIDDEN * F32 + SEQ * HIDDEN * F32 + ACT + ids
    assert embed.bwd_io_bytes == math.ceil(embed_bytes / BATCH)
    logits = TOKENS * VOCAB * F32
    loss = 8 + (8 + 2 * logits + TOKENS * I64) + 3 * logits
    lm_head = (logits + ACT) + (logits + ACT)
    ln_f = 3 * ACT + 2 * TOKENS * F32
    assert head.bwd_io_bytes == math.ceil((loss + lm_head + ln_f) / BATCH)


# -- custom models where batch * seq == hidden ------------------------------------------------

WIDTH, ROWS = 16, 8
"""At batch 2, the (batch * rows, width) gradients are (16, 16): a weight gradient's shape."""


class _Twice(nn.Module):
    """One Linear applied twice: its gradient is the sum of two partials (an aten add)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lin(torch.tanh(self.lin(x)))
        return out


def _coinciding() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), _Twice())


COINCIDING = BuiltModel(
    name="coinciding",
    family="custom",
    dataset=None,
    factory=_coinciding,
    input_shape=(ROWS, WIDTH),
    input_dtype=torch.float32,
    task="regress",
    target_shape=(ROWS, WIDTH),
)


def test_linear_backward_io_by_hand_when_shapes_coincide() -> None:
    """Per sample, with X = rows * width fp32 bytes: the first Linear's input is data (no
    gradient), so only its weight mm (reads the output gradient and the input) and bias sum
    (reads the output gradient) move 3 X; Tanh 3 X; the second Linear adds a grad-input mm,
    5 X; the Linear applied twice 2 x 5 X, plus its inner Tanh's 3 X."""
    x = ROWS * WIDTH * F32
    graph = trace_graph(COINCIDING, batch=2)
    layers = [layer.bwd_io_bytes for layer in graph.layers[:3]]
    assert layers == [3 * x, 3 * x, 5 * x]
    loss = 3 * x + 8 // 2 + 4 // 2  # mse backward; ones_like and the loss's gradient (scalars)
    assert graph.layers[3].bwd_io_bytes == 10 * x + 3 * x + loss


def test_backward_io_per_sample_does_not_depend_on_the_traced_batch() -> None:
    """Batch 2 makes activation gradients the shape of the weight gradients, batch 3 does not:
    per-sample figures agree (the last layer but for the loss's scalars, 12 bytes a step)."""
    two, three = trace_graph(COINCIDING, batch=2), trace_graph(COINCIDING, batch=3)
    assert [x.bwd_io_bytes for x in two.layers[:-1]] == [x.bwd_io_bytes for x in three.layers[:-1]]
    assert two.layers[-1].bwd_io_bytes == pytest.approx(three.layers[-1].bwd_io_bytes, abs=2)
    for graph in (two, three):
        for layer in graph.layers:
            assert _bwd_work(layer) == pytest.approx(layer.bwd_io_bytes, rel=0, abs=IO_ROUNDING)


# -- a tiny tied language model -----------------------------------------------------------------

T_SEQ, T_WIDTH, T_VOCAB = 5, 10, 11
"""At batch 2: 10 tokens, so (tokens, width) gradients are (10, 10), the mid weight's shape."""


class _TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(T_VOCAB, T_WIDTH)
        self.mid = nn.Linear(T_WIDTH, T_WIDTH)
        self.out = nn.Linear(T_WIDTH, T_VOCAB, bias=False)
        self.out.weight = self.emb.weight  # tied
        self.act = nn.Tanh()  # keeps the loss out of ``out``

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.act(self.out(self.mid(self.emb(idx))))
        return out


TIED = BuiltModel(
    name="tied",
    family="custom",
    dataset=None,
    factory=_TiedLM,
    input_shape=(T_SEQ,),
    input_dtype=torch.long,
    input_high=T_VOCAB,
    task="lm",
    num_classes=T_VOCAB,
    target_shape=(T_SEQ,),
)


@pytest.mark.parametrize("batch", [2, 3])
def test_tied_weight_gradient_left_out_by_hand(batch: int) -> None:
    """Per step, N = batch * seq tokens, V vocabulary, W width:

    * act (with the loss): ones_like 4 + 4; nll_loss backward: scalar gradient and total
      weight 4 + 4, (N, V) in and out, N targets; log-softmax backward 3 (N, V); tanh
      backward 3 (N, V);
    * out: grad-input mm (N, V) -> (N, W); weight mm (N, V) and (N, W) in, the tied weight's
      partial gradient out (left out);
    * mid: 5 (N, W) (grad-input mm 2, weight mm 2, bias sum 1);
    * emb: embedding backward reads (N, W) and the N ids, writes the other partial; the add
      of the two partials and the copy into ``.grad`` move parameter gradients only.
    """
    n = batch * T_SEQ
    logits, hidden = n * T_VOCAB * F32, n * T_WIDTH * F32
    expected = {
        "act": 16 + 2 * logits + n * I64 + 3 * logits + 3 * logits,
        "out": (logits + hidden) + (logits + hidden),
        "mid": 5 * hidden,
        "emb": hidden + n * I64,
    }
    graph = trace_graph(TIED, batch=batch)
    got = {layer.name: layer.bwd_io_bytes for layer in graph.layers}
    assert got == {name: math.ceil(b / batch) for name, b in expected.items()}
    emb = graph.layers[0]
    assert emb.params == T_VOCAB * T_WIDTH and graph.layers[2].shared_params == emb.params


# -- the propagation rules, on recorded ops -------------------------------------------------------


def test_gradient_status_passes_only_through_sums_and_copies() -> None:
    """Storage keys: 1 a parameter; 2, 3 activation gradients of the weight's shape; 4 a bf16
    partial gradient cast back (``_to_copy``) into 5, a second partial; 6 their sum, the total
    the parameter hook saw; 7 AccumulateGrad's empty copy of it, filled by ``copy_``; 8 a
    bias-style reduction of 2 (a parameter gradient, from its hook)."""
    shape = (16, 16)
    n = 16 * 16 * 4

    def d(*keys: int) -> list[tuple[int, int, tuple[int, ...]]]:
        return [(k, n if k != 4 else n // 2, shape) for k in keys]

    ops = [
        BwdOp(0, "matmul", "aten::mm", d(2, 1), d(3)),  # grad input: 2 + 3 count
        BwdOp(0, "matmul", "aten::mm", d(2, 3), d(4)),  # partial (bf16): 2 + 3 count
        BwdOp(0, "memory", "aten::_to_copy", d(4), d(5)),
        BwdOp(0, "matmul", "aten::mm", d(3, 2), d(9)),  # second partial
        BwdOp(0, "memory", "aten::add.Tensor", d(5, 9), d(6)),
        BwdOp(0, "memory", "aten::new_empty_strided", d(6), d(7)),
        BwdOp(0, "memory", "aten::copy_", d(7, 6), d(7)),
        BwdOp(0, "memory", "aten::sum.dim_IntList", d(2), d(8)),  # reads 2: counts
        BwdOp(0, "memory", "aten::add.Tensor", d(2, 3), d(10)),  # activation sum: counts
    ]
    state = TraceState(n_layers=1, excluded={1}, bwd_ops=ops, weight_grads={6, 8})
    state.finish_backward_io()
    assert state.weight_grads == {4, 5, 6, 7, 8, 9}
    assert state.stats[0].bwd_io == n * (2 + 2 + 2 + 1 + 3)
