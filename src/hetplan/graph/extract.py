"""Model -> :class:`ModelGraph`: trace one training step on the meta device.

Figures are per sample: the step is traced at ``batch`` samples (2 by default, avoiding
batch-1 special cases) and divided by it. Approximations:

* ``fwd_io_bytes``/``bwd_io_bytes`` sum the bytes of every input and output tensor of every
  non-view op (each read/write once, no cache reuse), excluding parameters, buffers and
  parameter gradients (batch-independent traffic the cost model prices from ``param_bytes``).
* attention (``scaled_dot_product_attention``) is traced as the fused flash kernel, which saves
  no (T, T) score matrix; FLOPs count the full score matrix, as torch does, except a causal
  kernel's: half of it (``ops.CAUSAL_ATTENTION_SHARE``: the tiles it computes).
* convolution FLOPs are our own count (:mod:`conv_flops`: torch's counter overcounts grouped
  and depthwise weight gradients); every other op's are torch's ``FlopCounterMode``'s.
* ``LayerInfo.work`` splits each pass's FLOPs, I/O bytes and kernels by operation class
  (:data:`OP_CLASSES`, :func:`ops.op_class`); the parts add up to the layer's totals.
* ``saved_bytes`` is the storage size of each tensor autograd saves, excluding parameters,
  counted once (in the first layer that saves it).
* ops outside any layer (the loss, glue code in a custom ``forward``) belong to the layer that
  ran last before them; so the loss is part of the last layer.

Speed (no effect on the figures): modules are built without running weight initialisers
(:mod:`meta`), runs of identical layers are traced in part (:mod:`dedup`), and zoo graphs are
cached on disk (:mod:`cache`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Protocol

import torch
from torch import nn

from hetplan.errors import ModelError
from hetplan.graph import cache
from hetplan.graph.built import BuiltModel
from hetplan.graph.data import loss_function
from hetplan.graph.meta import build_on_meta
from hetplan.graph.resolve import resolve_model
from hetplan.graph.split import split_problem
from hetplan.graph.tp_units import (
    TpUnit,
    VocabPair,
    find_vocab_pair,
    search_tp_units,
    split_count,
)
from hetplan.graph.trace import LayerStats, TraceState, trace_step
from hetplan.graph.types import OP_CLASSES, LayerInfo, ModelGraph, OpWork
from hetplan.planspec.torch_dtypes import TORCH_DTYPES

DTYPES = TORCH_DTYPES  # the one dtype table (hetplan.planspec.dtypes), as torch dtypes
CROSS_ENTROPY_TASKS = ("classify", "lm")  # tasks whose default loss is cross-entropy


def select_layers(model: nn.Module, depth: int) -> list[tuple[str, nn.Module]]:
    """Modules at ``depth`` (1 = the root's children); a module without children stays whole."""
    if depth < 1:
        raise ModelError(f"depth must be >= 1, got {depth}")
    out: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, module: nn.Module, level: int) -> None:
        children = list(module.named_children())
        if level == depth or not children:
            out.append((prefix, module))
            return
        for name, child in children:
            walk(f"{prefix}.{name}" if prefix else name, child, level + 1)

    walk("", model, 0)
    return out


class ModelRefLike(Protocol):
    """What :func:`build_graph` reads from a :class:`hetplan.planspec.ModelRef`."""

    name: str
    dataset: str | None
    depth: int | None
    dtype: str


def build_graph(
    model: str | ModelRefLike | BuiltModel,
    dataset: str | None = None,
    depth: int | None = None,
    batch: int = 2,
    dtype: str = "fp32",
) -> ModelGraph:
    """Extract the layer graph of ``model``: a name (zoo, ``file.py:fn``, ``pkg.mod:fn``), a
    :class:`hetplan.planspec.ModelRef` (its dataset/depth/dtype win over the arguments'
    defaults) or a :class:`BuiltModel`. Results are cached per argument tuple in memory and,
    for zoo models, on disk (see :mod:`hetplan.graph.cache`)."""
    if isinstance(model, BuiltModel):
        return _graph_of_built(model, depth, batch, dtype)
    if not isinstance(model, str):  # a ModelRef (structural: graph sits below plan)
        dataset = model.dataset if model.dataset is not None else dataset
        depth = model.depth if model.depth is not None else depth
        dtype = model.dtype or dtype
        model = model.name
    return _cached_graph(model, dataset, depth, batch, dtype)


@functools.cache
def _cached_graph(
    name: str, dataset: str | None, depth: int | None, batch: int, dtype: str
) -> ModelGraph:
    built = resolve_model(name, dataset)
    key = None if built.family == "custom" else cache.cache_key(name, dataset, depth, batch, dtype)
    graph = cache.load(key) if key is not None else None
    if graph is None:
        graph = _graph_of_built(built, depth, batch, dtype)
        if key is not None:
            cache.store(key, graph)
    return graph


def trace_graph(
    built: BuiltModel,
    depth: int | None = None,
    batch: int = 2,
    dtype: str = "fp32",
    dedup: bool = True,
) -> ModelGraph:
    """Uncached extraction of ``built``'s graph; ``dedup=False`` traces every identical layer
    in full (slower, same figures: kept for checking the deduplication)."""
    return _graph_of_built(built, depth, batch, dtype, dedup)


def _graph_of_built(
    built: BuiltModel, depth: int | None, batch: int, dtype: str, dedup: bool = True
) -> ModelGraph:
    if dtype not in DTYPES:
        raise ModelError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if batch < 1:
        raise ModelError(f"batch must be >= 1, got {batch}")
    depth = built.default_depth if depth is None else depth
    torch_dtype = DTYPES[dtype]
    with torch.device("meta"):
        try:
            module = build_on_meta(built.factory).to(torch_dtype)
        except Exception as err:
            raise ModelError(f"model {built.name!r}: building failed: {_one_line(err)}") from None
    module.train()
    named = select_layers(module, depth)
    in_dtype = torch_dtype if built.input_is_float else built.input_dtype
    inputs = torch.empty((batch, *built.input_shape), dtype=in_dtype, device="meta")
    targets = _meta_targets(built, batch, torch_dtype)
    try:
        layers = [m for _, m in named]
        state = trace_step(module, layers, inputs, loss_function(built), targets, dedup)
    except Exception as err:
        raise ModelError(f"model {built.name!r}: tracing failed: {_one_line(err)}") from None
    return _assemble(
        built=built,
        module=module,
        named=named,
        state=state,
        batch=batch,
        dtype=dtype,
        depth=depth,
        inputs=inputs,
    )


def _meta_targets(built: BuiltModel, batch: int, dtype: torch.dtype) -> torch.Tensor:
    dt = dtype if built.task == "regress" else torch.long
    return torch.empty((batch, *built.target_shape), dtype=dt, device="meta")


def _assemble(
    *,
    built: BuiltModel,
    module: nn.Module,
    named: list[tuple[str, nn.Module]],
    state: TraceState,
    batch: int,
    dtype: str,
    depth: int,
    inputs: torch.Tensor,
) -> ModelGraph:
    notes: list[str] = []
    ran = [named[pos] for pos in state.order]
    skipped = [name for i, (name, _) in enumerate(named) if i not in state.order]
    if state.reused:
        again = ", ".join(named[pos][0] for pos in sorted(state.reused))
        notes.append(f"called again after later layers (counted where it ran): {again}")
    if skipped:
        notes.append(f"never executed, left out: {', '.join(skipped)}")
    owned = _param_owners(module, [m for _, m in ran], notes)
    layers = tuple(
        _layer_info(name, stats, owned[i], batch, _shared(mod, owned, i))
        for i, ((name, mod), stats) in enumerate(zip(ran, state.stats, strict=False))
    )
    layers = _with_tp_facts(module, layers, DTYPES[dtype].itemsize, notes)
    layers = _with_loss_logits(layers, built.task, DTYPES[dtype].itemsize)
    return ModelGraph(
        name=built.name,
        input_shape=tuple(built.input_shape),
        input_bytes=inputs.nbytes // batch,
        dtype=dtype,
        layers=layers,
        cut_bytes=_cut_bytes(state, len(layers), batch),
        depth=depth,
        notes=tuple(notes),
        split_error=split_problem(module, [layer.name for layer in layers]),
    )


def _with_loss_logits(
    layers: tuple[LayerInfo, ...], task: str, itemsize: int
) -> tuple[LayerInfo, ...]:
    """The last layer with the logits its cross-entropy loss reads (``LayerInfo.loss_logits``,
    elements per sample: the layer's output); unchanged for a regression's mean squared error,
    which saves no tensor of its own."""
    if task not in CROSS_ENTROPY_TASKS or not layers:
        return layers
    last = layers[-1]
    return (*layers[:-1], dataclasses.replace(last, loss_logits=last.out_bytes // itemsize))


def _param_owners(
    model: nn.Module, layers: list[nn.Module], notes: list[str]
) -> list[list[torch.Tensor]]:
    """Trainable parameters per layer; a shared tensor belongs to the first layer using it."""
    seen: set[int] = set()
    owned: list[list[torch.Tensor]] = []
    for m in layers:
        mine = [p for p in m.parameters() if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in mine)
        owned.append(mine)
    orphans = [p for p in model.parameters() if p.requires_grad and id(p) not in seen]
    if orphans and owned:
        owned[0].extend(orphans)
        notes.append(f"{len(orphans)} parameter tensors outside every layer counted in the first")
    return owned


def _shared(module: nn.Module, owned: list[list[torch.Tensor]], i: int) -> tuple[int, int]:
    """Parameters layer ``i`` (``module``) uses that another layer owns (tied weights), and
    the index of the earliest such owner (-1: none)."""
    mine = {id(p) for p in owned[i]}
    foreign = [p for p in module.parameters() if p.requires_grad and id(p) not in mine]
    owners = [j for j, ps in enumerate(owned) if any(q is p for p in foreign for q in ps)]
    return sum(p.numel() for p in foreign), min(owners, default=-1)


def _layer_info(
    name: str,
    st: LayerStats,
    params: list[torch.Tensor],
    batch: int,
    shared: tuple[int, int] = (0, -1),
) -> LayerInfo:
    sizes = tuple(p.numel() * p.element_size() for p in params)
    return LayerInfo(
        name=name,
        shared_params=shared[0],
        shared_owner=shared[1] if shared[0] else -1,
        fwd_flops=st.fwd_flops / batch,
        bwd_flops=st.bwd_flops / batch,
        fwd_conv_flops=st.fwd_conv_flops / batch,
        bwd_conv_flops=st.bwd_conv_flops / batch,
        params=sum(p.numel() for p in params),
        param_bytes=sum(sizes),
        param_tensor_bytes=sizes,
        param_tensor_rows=tuple(p.shape[0] if p.dim() else 1 for p in params),
        out_bytes=math.ceil(max(st.out_bytes, 0) / batch),
        saved_bytes=math.ceil(st.saved / batch),
        saved_input_bytes=math.ceil(st.saved_in / batch),
        fwd_io_bytes=math.ceil(st.fwd_io / batch),
        bwd_io_bytes=math.ceil(st.bwd_io / batch),
        fwd_kernels=st.fwd_kernels,
        bwd_kernels=st.bwd_kernels,
        work=_op_work(st, batch),
    )


def _op_work(st: LayerStats, batch: int) -> tuple[OpWork, ...]:
    """Per-class figures per sample (kernels per pass), forward then backward, each in
    :data:`OP_CLASSES` order; classes that launched nothing and count no FLOPs are left out.
    I/O bytes are not rounded up as ``fwd_io_bytes`` is: their sum is within a byte of it."""
    out = []
    for backward in (False, True):
        for cls in OP_CLASSES:
            w = st.work.get((cls, backward))
            if w is None or not (w.kernels or w.flops):
                continue
            out.append(
                OpWork(
                    op_class=cls,
                    backward=backward,
                    flops=w.flops / batch,
                    io_bytes=w.io / batch,
                    kernels=w.kernels,
                    probe_intensity=w.probe_flops / w.flops if w.flops else 0.0,
                )
            )
    return tuple(out)


def _with_tp_facts(
    module: nn.Module, layers: tuple[LayerInfo, ...], itemsize: int, notes: list[str]
) -> tuple[LayerInfo, ...]:
    """``layers`` with what tensor parallelism splits in each (``LayerInfo.tp_*``): the
    Megatron-style units found from structure (fx traces of each layer, no weights read) and
    the embedding/head pair over the vocabulary."""
    names = [layer.name for layer in layers]
    try:
        units, untraced = search_tp_units(module, names)
        vocab = find_vocab_pair(module)
    except Exception as err:  # structure search failed: every layer replicated
        notes.append(f"tensor-parallel units not searched: {_one_line(err)}")
        return layers
    out = []
    for layer in layers:
        errors = [f"{fqn}: {err}" for fqn, err in untraced if _inside(fqn, layer.name)]
        # Its units are unknown, so it is priced whole on every rank (only its vocabulary part
        # still splits); the search offers no TP plan (plan.tp.has_tp_units).
        mine = [] if errors else [u for u in units if _inside(u.module, layer.name)]
        info = _layer_tp_facts(module, layer, mine, vocab, itemsize)
        out.append(dataclasses.replace(info, tp_error="; ".join(errors)) if errors else info)
    notes += [
        f"tensor parallelism not offered: torch.fx could not trace {fqn} ({err}), so the "
        f"attention and MLP units of layer {_layer_of(fqn, names)} are unknown and every TP "
        "rank would compute that layer whole"
        for fqn, err in untraced
    ]
    return tuple(out)


def _layer_tp_facts(
    module: nn.Module,
    layer: LayerInfo,
    units: list[TpUnit],
    vocab: VocabPair | None,
    itemsize: int,
) -> LayerInfo:
    """``layer`` with the TP facts of its ``units`` and its part of the vocabulary pair."""
    found = [(u, split_count(module, u)) for u in units]
    mine = [u for u, n in found if n > 0]
    counts = [n for _, n in found if n > 0]
    roles = []
    if vocab is not None and _inside(vocab.embedding, layer.name):
        roles.append("embedding")
    if vocab is not None and vocab.head is not None and _inside(vocab.head, layer.name):
        roles.append("head")
    hidden, width = 0, 0  # all-reduced width; width of the layer's output
    if mine:
        down = module.get_submodule(mine[0].rowwise[0])
        hidden = width = int(down.out_features)
    if roles and vocab is not None:
        emb = module.get_submodule(vocab.embedding)
        counts.append(int(emb.num_embeddings))
        hidden = int(emb.embedding_dim)
        width = int(emb.num_embeddings) if "head" in roles else hidden
    if not counts:
        return layer
    tokens = max(round(layer.out_bytes / (width * itemsize)), 1) if width else 0
    return dataclasses.replace(
        layer,
        tp_units=len(mine),
        tp_linears=sum(len(u.colwise) + len(u.rowwise) for u in mine),
        tp_vocab="+".join(roles),
        tp_split=math.gcd(*counts),
        tp_tokens=tokens,
        tp_hidden=hidden,
    )


def _layer_of(fqn: str, layers: list[str]) -> str:
    """The layer (of ``layers``) holding module ``fqn``."""
    return next((name for name in layers if _inside(fqn, name)), fqn)


def _inside(fqn: str, layer: str) -> bool:
    """Module ``fqn`` is ``layer`` or inside it (``""``: the root, holding everything)."""
    return not layer or fqn == layer or fqn.startswith(layer + ".")


def _cut_bytes(state: TraceState, n: int, batch: int) -> tuple[int, ...]:
    """Bytes of every tensor produced at or before layer ``i`` and used after it: the most
    any later layer reads of it (a view of a slice sends only the slice)."""
    cuts = [0] * max(n - 1, 0)
    for key, last in state.last_use.items():
        first = max(state.producer[key], 0)
        reads = sorted(state.reads.get(key, {}).items())
        for i in range(first, min(last, n - 1)):
            cuts[i] += max((b for layer, b in reads if layer > i), default=state.size[key])
    return tuple(math.ceil(c / batch) for c in cuts)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"
