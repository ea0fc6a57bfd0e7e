"""Megatron-style tensor-parallel units, found from a model's structure and checked by simulation.

A *unit* is a piece of a model that tensor parallelism can split with one all-reduce of its
output forward (and one of its input gradient backward), as Megatron-LM does:

* **attention**: the q, k and v projections split by output features (each rank holds whole
  heads, ``ColwiseParallel``) and the output projection by input features (``RowwiseParallel``);
* **MLP**: the up projection (and the gate of a gated MLP such as SwiGLU) split by output
  features and the down projection by input features.

Units are found without looking at names (:func:`find_tp_units`): each layer of the graph is
traced with ``torch.fx`` (``nn.Linear`` stays a call), attention is an
``F.scaled_dot_product_attention`` call or a softmax between two matmuls, whose q/k/v come from
Linears through shape ops (and rotary embeddings) and whose output reaches one Linear through
shape ops; an MLP is Linear ``d -> f``, pointwise ops only, Linear ``f -> d``. The structure says
which Linears to split, not whether the module's code still runs on local shapes (a head count
stored as an attribute and used in a ``view`` does not): :func:`check_tp_units` runs every rank's
shard of a unit in one process and accepts the unit only if the all-reduced result equals the
unsharded output. :func:`tp_layout` combines both with the embedding/output-head pair over the
vocabulary (:func:`find_vocab_pair`), split by vocabulary rows.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import fx, nn
from torch.nn import functional as F  # noqa: N812

FUSED_QKV = "fused q/k/v projection: split it into three Linear layers for tensor parallelism"
"""Why an attention whose q, k and v come from one Linear is refused: an even split of the fused
output features gives rank 0 all of q and part of k, not its heads of each."""

SYNTHETIC_SHAPE = (2, 8)
"""Leading (batch, sequence) dims of the synthetic input a unit is checked on without a sample."""

SEED = 0
"""Seed of the synthetic input and of the random weights the check uses (deterministic)."""

Sample = Sequence[Any]
"""The model's forward positional arguments (a real batch, e.g. ``(tokens,)``)."""


@dataclass(frozen=True, kw_only=True)
class TpUnit:
    """One Megatron-style unit: Linears to split by output / input features, all inside
    ``module`` (FQNs in the model's names)."""

    kind: Literal["attention", "mlp"]
    module: str
    """The deepest module whose forward runs the whole unit (e.g. ``block0.attn``)."""
    colwise: tuple[str, ...]
    """``nn.Linear`` modules split by output features (q, k, v / up, gate), in that order."""
    rowwise: tuple[str, ...]
    """``nn.Linear`` modules split by input features (output projection / down projection)."""
    head_attr: str | None = None
    """An int attribute of ``module`` to divide by tp before running the shards (a head count
    the forward uses in a ``view``, torchtitan style); None when the code needs no patch."""


@dataclass(frozen=True, kw_only=True)
class VocabPair:
    """The embedding over the vocabulary and the Linear producing vocabulary logits."""

    embedding: str
    head: str | None
    """None: the model has no such head (e.g. a classifier)."""
    tied: bool
    """The head's weight is the embedding's weight (the same Parameter)."""


@dataclass(frozen=True, kw_only=True)
class TpLayout:
    """What tensor parallelism at ``tp`` splits in a model: ready units, refusals, vocabulary."""

    tp: int
    units: tuple[TpUnit, ...]
    refused: tuple[str, ...]
    """One line per unit found but not ready (module, then why)."""
    vocab: VocabPair | None
    """The vocabulary pair, only if the vocabulary size divides by ``tp``."""
    biased: frozenset[str] = frozenset()
    """The split Linears (units and head) that have a bias: their bias names exist."""

    def sharded_params(self) -> dict[str, int]:
        """Parameter FQN -> the dim it is split on; parameters not listed are replicated.

        A rowwise bias is replicated (added once, after the all-reduce). A tied head weight is
        listed under both names (the embedding's and the head's), as the model holds it twice.
        """
        out: dict[str, int] = {}
        for unit in self.units:
            for lin in unit.colwise:
                out.update(self._linear(lin, bias=True, dim=0))
            for lin in unit.rowwise:
                out.update(self._linear(lin, bias=False, dim=1))
        if self.vocab is not None:
            out[f"{self.vocab.embedding}.weight"] = 0
            if self.vocab.head is not None:
                out.update(self._linear(self.vocab.head, bias=True, dim=0))
        return out

    def _linear(self, fqn: str, *, bias: bool, dim: int) -> dict[str, int]:
        names = {f"{fqn}.weight": dim}
        if bias and fqn in self.biased:
            names[f"{fqn}.bias"] = 0
        return names


# --- detection ---------------------------------------------------------------------------------

# Shape ops and casts: they move or convert elements without mixing features, so a projection's
# output split by features stays split the same way through them.
_SHAPE_METHODS = frozenset(
    {
        "view", "reshape", "transpose", "permute", "contiguous", "split", "chunk", "unflatten",
        "flatten", "unbind", "expand", "repeat", "repeat_interleave", "unsqueeze", "squeeze",
        "float", "half", "bfloat16", "to", "type_as",
    }
)  # fmt: skip
_SHAPE_FUNCS: frozenset[Any] = frozenset(
    {
        operator.getitem, torch.reshape, torch.transpose, torch.permute, torch.split,
        torch.chunk, torch.flatten, torch.unflatten, torch.unbind, torch.squeeze,
        torch.unsqueeze, torch.repeat_interleave, torch.view_as_complex, torch.view_as_real,
    }
)  # fmt: skip
_ELEMENTWISE_FUNCS: frozenset[Any] = frozenset(
    {
        operator.mul, operator.add, operator.sub, operator.neg, operator.truediv, operator.pow,
        torch.mul, torch.add, torch.sub, torch.neg, torch.div, torch.pow, torch.cat,
    }
)  # fmt: skip
_ELEMENTWISE_METHODS = frozenset({"mul", "add", "sub", "neg", "div", "pow"})
_ACTIVATION_MODULES = (
    nn.GELU, nn.ReLU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Mish, nn.LeakyReLU, nn.ELU, nn.Softplus,
    nn.Hardswish, nn.Dropout, nn.Identity,
)  # fmt: skip
_ACTIVATION_FUNCS: frozenset[Any] = frozenset(
    {
        F.gelu, F.relu, F.silu, F.mish, F.leaky_relu, F.elu, F.softplus, F.hardswish,
        F.dropout, torch.tanh, torch.sigmoid, torch.relu,
    }
)  # fmt: skip
_ACTIVATION_METHODS = frozenset({"relu", "tanh", "sigmoid"})
_RESHAPE_FUNCS: frozenset[Any] = frozenset({torch.reshape, torch.unflatten})
_RESHAPE_METHODS = frozenset({"view", "reshape", "unflatten", "expand"})
_MATMUL_FUNCS: frozenset[Any] = frozenset({operator.matmul, torch.matmul, torch.bmm})
_MATMUL_METHODS = frozenset({"matmul", "bmm"})
_SOFTMAX_FUNCS: frozenset[Any] = frozenset({torch.softmax, F.softmax})
_SCORE_METHODS = frozenset({"masked_fill", "float", "to", "type_as", "mul", "div", "add"})
_SCORE_FUNCS: frozenset[Any] = frozenset(
    {operator.truediv, operator.mul, operator.add, torch.where, torch.div, torch.mul, F.dropout}
)


class _Tracer(fx.Tracer):  # type: ignore[misc]
    """fx's default leaves (torch.nn modules) plus every ``nn.Linear`` subclass, so that a
    projection is always one ``call_module`` node whatever class the model uses."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, nn.Linear) or bool(super().is_leaf_module(m, module_qualified_name))


@dataclass(frozen=True)
class _Graph:
    """A traced module: its graph and the module it was traced from (to look targets up)."""

    graph: fx.Graph
    root: nn.Module

    def linear(self, node: fx.Node) -> nn.Linear | None:
        if node.op != "call_module":
            return None
        mod = self.root.get_submodule(str(node.target))
        return mod if isinstance(mod, nn.Linear) else None

    def module(self, node: fx.Node) -> nn.Module | None:
        return self.root.get_submodule(str(node.target)) if node.op == "call_module" else None


def _is(node: fx.Node, funcs: frozenset[Any], methods: frozenset[str]) -> bool:
    if node.op == "call_function":
        return node.target in funcs
    return node.op == "call_method" and node.target in methods


def _is_shape(node: fx.Node) -> bool:
    return _is(node, _SHAPE_FUNCS, _SHAPE_METHODS)


def _is_qkv_path(node: fx.Node) -> bool:
    """Between a q/k/v projection and the attention: shape ops and the elementwise ops of a
    rotary embedding (``q * cos + rotate_half(q) * sin``), which act on each head alone."""
    return _is_shape(node) or _is(node, _ELEMENTWISE_FUNCS, _ELEMENTWISE_METHODS)


def _linears_back(
    g: _Graph, start: Iterable[fx.Node], through: Callable[[fx.Node], bool]
) -> list[fx.Node]:
    """Linear calls that the ``start`` nodes are computed from through ``through`` nodes only
    (a start node itself if it is one), in the order first reached."""
    return _walk(g, list(start)[::-1], through, lambda n: reversed(n.all_input_nodes))


def _linears_fwd(g: _Graph, node: fx.Node, through: Callable[[fx.Node], bool]) -> list[fx.Node]:
    """Linear calls fed by ``node`` through ``through`` nodes only."""
    return _walk(g, list(node.users), through, lambda n: n.users)


def _walk(
    g: _Graph,
    todo: list[fx.Node],
    through: Callable[[fx.Node], bool],
    step: Callable[[fx.Node], Iterable[fx.Node]],
) -> list[fx.Node]:
    """Depth-first from ``todo`` along ``step``, stopping at Linear calls (collected) and at
    nodes ``through`` rejects."""
    found: list[fx.Node] = []
    seen: set[fx.Node] = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if g.linear(n) is not None:
            found.append(n)
        elif through(n):
            todo.extend(step(n))
    return found


def _attention_roles(g: _Graph, node: fx.Node) -> tuple[tuple[Any, Any, Any], fx.Node] | None:
    """(q, k, v argument nodes, the attention's output node) if ``node`` is an attention core:
    a ``scaled_dot_product_attention`` call, or a softmax fed by a matmul ``q @ k^T`` (through
    scaling, masking and casts) and feeding one matmul ``p @ v``."""
    if node.op == "call_function" and node.target is F.scaled_dot_product_attention:
        names = ("query", "key", "value")
        args = [*node.args[:3], *(node.kwargs.get(k) for k in names[len(node.args) :])]
        return (args[0], args[1], args[2]), node
    if not _is(node, _SOFTMAX_FUNCS, frozenset({"softmax"})):
        return None
    qk = _matmuls(g, node, up=True)
    pv = _matmuls(g, node, up=False)
    if len(qk) != 1 or len(pv) != 1 or len(qk[0].args) < 2 or len(pv[0].args) < 2:
        return None
    return (qk[0].args[0], qk[0].args[1], pv[0].args[1]), pv[0]


def _matmuls(g: _Graph, node: fx.Node, *, up: bool) -> list[fx.Node]:
    """Matmuls reached from a softmax through score ops (scale, mask, cast, dropout): upwards
    its ``q @ k^T``, downwards its ``p @ v`` (where the probabilities are the left operand)."""
    found: list[fx.Node] = []
    seen: set[fx.Node] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        nxt = n.all_input_nodes if up else list(n.users)
        for m in nxt:
            if m in seen:
                continue
            seen.add(m)
            if _is(m, _MATMUL_FUNCS, _MATMUL_METHODS):
                if up or (m.args and m.args[0] is n):
                    found.append(m)
            elif _is(m, _SCORE_FUNCS, _SCORE_METHODS) or isinstance(g.module(m), nn.Dropout):
                todo.append(m)
    return found


def _find_attention(g: _Graph, node: fx.Node) -> tuple[list[fx.Node], fx.Node] | None:
    """(q/k/v Linear calls in that order, deduplicated; output projection call) or None."""
    roles = _attention_roles(g, node)
    if roles is None:
        return None
    (q, k, v), out = roles
    qkv: list[fx.Node] = []
    for arg in (q, k, v):
        if not isinstance(arg, fx.Node):
            return None
        found = _linears_back(g, [arg], _is_qkv_path)
        if len(found) != 1:
            return None
        if found[0] not in qkv:
            qkv.append(found[0])
    proj = _linears_fwd(g, out, _is_shape)
    if len(proj) != 1:
        return None
    return qkv, proj[0]


def _is_pointwise(g: _Graph, node: fx.Node) -> bool:
    """Between an MLP's up and down projections: activations, dropout, the gate's product and
    elementwise arithmetic (activations written out, e.g. tanh-approximated GELU)."""
    mod = g.module(node)
    if mod is not None:
        return isinstance(mod, _ACTIVATION_MODULES)
    return _is(
        node,
        _ACTIVATION_FUNCS | (_ELEMENTWISE_FUNCS - {torch.cat}),
        _ACTIVATION_METHODS | _ELEMENTWISE_METHODS,
    )


def _find_mlp(g: _Graph, up: fx.Node, used: set[fx.Node]) -> tuple[list[fx.Node], fx.Node] | None:
    """(up and gate Linear calls, down projection call) for an MLP starting at ``up``: a Linear
    d -> f reaching a Linear f -> d through pointwise ops; a gate is another Linear d -> f feeding
    the down projection the same way. The down projection must return to width d (a d -> f -> k
    head, such as a classifier on a pooler, is no unit)."""
    a = g.linear(up)
    if a is None or up in used:
        return None
    for down in _linears_fwd(g, up, lambda n: _is_pointwise(g, n)):
        b = g.linear(down)
        if down in used or b is None:
            continue
        if b.in_features != a.out_features or b.out_features != a.in_features:
            continue
        cols = [up]
        for gate in _linears_back(g, down.all_input_nodes, lambda n: _is_pointwise(g, n)):
            lin = g.linear(gate)
            same = lin is not None and (lin.in_features, lin.out_features) == (
                a.in_features,
                a.out_features,
            )
            if gate not in cols and gate not in used and gate is not down and same:
                cols.append(gate)
        return cols, down
    return None


def _path_of(node: fx.Node) -> str:
    """The module whose forward runs ``node``: a Linear's parent, or the innermost entry of the
    node's ``nn_module_stack`` ("" for the traced root)."""
    if node.op == "call_module":
        return str(node.target).rpartition(".")[0]
    stack = node.meta.get("nn_module_stack") or {}
    paths = [str(v[0]) for v in stack.values()]
    return paths[-1] if paths else ""


def _owner(nodes: Iterable[fx.Node]) -> str:
    """Deepest module that runs all ``nodes``: the longest common dotted prefix of their paths."""
    parts = [_path_of(n).split(".") if _path_of(n) else [] for n in nodes]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if any(p != level[0] for p in level):
            break
        common.append(level[0])
    return ".".join(common)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _units_of_graph(g: _Graph, prefix: str) -> list[TpUnit]:
    """Attention units first (their projections must not be taken for an MLP), then MLPs."""
    units: list[TpUnit] = []
    used: set[fx.Node] = set()
    for node in g.graph.nodes:
        found = _find_attention(g, node)
        if found is None or used & {*found[0], found[1]}:
            continue
        cols, proj = found
        units.append(_unit(prefix, "attention", cols, proj, [*cols, node, proj]))
        used |= {*cols, proj}
    for node in g.graph.nodes:
        mlp = _find_mlp(g, node, used)
        if mlp is None:
            continue
        cols, down = mlp
        units.append(_unit(prefix, "mlp", cols, down, [*cols, down]))
        used |= {*cols, down}
    return units


def _unit(
    prefix: str,
    kind: Literal["attention", "mlp"],
    cols: list[fx.Node],
    row: fx.Node,
    members: list[fx.Node],
) -> TpUnit:
    return TpUnit(
        kind=kind,
        module=_join(prefix, _owner(members)),
        colwise=tuple(_join(prefix, str(c.target)) for c in cols),
        rowwise=(_join(prefix, str(row.target)),),
    )


def _linear_count(module: nn.Module) -> int:
    return sum(isinstance(m, nn.Linear) for m in module.modules())


def _units_in(
    module: nn.Module, prefix: str, failures: list[tuple[str, str]] | None = None
) -> list[TpUnit]:
    """Units inside ``module`` (named ``prefix``); a module fx cannot trace (control flow on
    values, say) is searched child by child, so units inside its children are still found.
    ``failures`` collects ``(fqn, error)`` of the deepest untraceable modules holding Linears
    that the units found inside do not cover and that may have formed a unit
    (:func:`_may_form_unit`); a module whose children's units cover it is not a failure."""
    if _linear_count(module) < 2 or isinstance(module, nn.Linear):
        return []  # a unit has two Linears at least
    try:
        graph = _Tracer().trace(module)
    except Exception as err:  # any failure to trace: look inside instead
        before = len(failures) if failures is not None else 0
        units = [
            u for n, c in module.named_children() for u in _units_in(c, _join(prefix, n), failures)
        ]
        if (
            failures is not None
            and len(failures) == before
            and _may_form_unit(_uncovered(module, prefix, units))
        ):
            failures.append((prefix, _one_line(err)))
        return units
    return _units_of_graph(_Graph(graph, module), prefix)


def _uncovered(module: nn.Module, prefix: str, units: Sequence[TpUnit]) -> list[nn.Linear]:
    """Linears of ``module`` (named ``prefix``) that none of ``units`` splits."""
    covered = {fqn for u in units for fqn in (*u.colwise, *u.rowwise)}
    return [
        m
        for n, m in module.named_modules()
        if isinstance(m, nn.Linear) and _join(prefix, n) not in covered
    ]


def _may_form_unit(linears: Sequence[nn.Linear]) -> bool:
    """Two of ``linears`` map ``d -> f`` and ``f -> d``, as an MLP's up and down projections or
    an attention's q and output projections do; a ``d -> f -> k`` classifier head does not."""
    shapes = Counter((lin.in_features, lin.out_features) for lin in linears)
    # a square d -> d needs a second one (q and output projection of width d)
    return any(shapes[(f, d)] > (d == f) for d, f in shapes)


def find_tp_units(model: nn.Module, layers: Sequence[str]) -> list[TpUnit]:
    """Units found from structure (fx), each inside exactly one of ``layers`` (the graph's
    layers, module FQNs at the plan's depth); a unit cut by a layer boundary is not returned.

    Each layer is traced on its own, so a unit spread over several layers (the layers are
    deeper than the unit's module) is never seen whole, and is not returned: the stage program
    would run its parts as separate calls, baking shapes that splitting cannot change. Works on
    meta models (tracing reads no values).
    """
    return search_tp_units(model, layers)[0]


def search_tp_units(
    model: nn.Module, layers: Sequence[str]
) -> tuple[list[TpUnit], list[tuple[str, str]]]:
    """:func:`find_tp_units` and the modules it could not trace: ``(fqn, error)`` each."""
    failures: list[tuple[str, str]] = []
    units = [u for layer in layers for u in _units_in(model.get_submodule(layer), layer, failures)]
    return units, failures


def split_count(model: nn.Module, unit: TpUnit) -> int:
    """What a tensor-parallel degree must divide for ``unit`` to split (0: it never splits).

    An MLP: the gcd of its up/gate projections' output features. An attention: the gcd of
    the heads of its q, k and v projections (each rank must hold whole heads); a projection's
    heads are its output features over the head size read from the first ``view``/
    ``reshape``/``unflatten`` after it (its last int literal: ``view(b, t, -1, head_dim)``,
    ``view(b, t, n_heads, head_dim)``; a trailing -1 leaves the literal before it as the head
    count), its output features when no literal is found. A fused q/k/v projection: 0
    (:data:`FUSED_QKV`, refused by :func:`check_tp_units`). Structure only (works on meta);
    the readiness check still decides at run time.
    """
    if unit.kind == "attention" and len(unit.colwise) < 3:
        return 0
    widths = {fqn: _linear(model, fqn).out_features for fqn in unit.colwise}
    if unit.kind == "attention":
        for fqn, heads in _head_counts(model, unit).items():
            widths[fqn] = heads
    return math.gcd(*widths.values())


def _head_counts(model: nn.Module, unit: TpUnit) -> dict[str, int]:
    """Heads of each q/k/v projection whose output is reshaped into heads (see
    :func:`split_count`); projections without such a reshape are left out."""
    owner = model.get_submodule(unit.module)
    try:
        graph = _Tracer().trace(owner)
    except Exception:  # untraceable: no head sizes, the widths stand
        return {}
    g = _Graph(graph, owner)
    rel = _relative(unit)
    out: dict[str, int] = {}
    for node in graph.nodes:
        if node.op != "call_module" or str(node.target) not in rel.colwise:
            continue
        lin = g.linear(node)
        shape = _first_reshape(node)
        if lin is None or shape is None:
            continue
        literals = list(_ints(shape.args[1:]))
        heads = 0
        if literals and literals[-1] > 0 and lin.out_features % literals[-1] == 0:
            heads = lin.out_features // literals[-1]
        elif len(literals) > 1 and literals[-1] < 0 and literals[-2] > 0:
            heads = literals[-2]
        if heads > 0:
            fqn = unit.colwise[rel.colwise.index(str(node.target))]
            out[fqn] = heads
    return out


def _first_reshape(node: fx.Node) -> fx.Node | None:
    """The first view/reshape/unflatten reached from ``node`` through shape ops."""
    todo = list(node.users)
    seen: set[fx.Node] = set()
    while todo:
        n = todo.pop(0)
        if n in seen:
            continue
        seen.add(n)
        if _is(n, _RESHAPE_FUNCS, _RESHAPE_METHODS) and n.target != "expand":
            return n
        if _is_shape(n):
            todo.extend(n.users)
    return None


# --- readiness check ---------------------------------------------------------------------------


def check_tp_units(
    model: nn.Module, units: Sequence[TpUnit], tp: int, sample: Sample | None = None
) -> tuple[list[TpUnit], list[str]]:
    """(ready units, one-line reasons for refused ones) by the one-process simulation of tp shards.

    Each rank's shard of a unit is run on a copy of its module (q/k/v or up/gate Linears cut to
    the rank's output features, the output or down projection to its input features); the
    projection's partial outputs are summed (the all-reduce) and every rank's result must equal
    the unsharded one. Refused without running: a fused q/k/v projection (:data:`FUSED_QKV`),
    features not divisible by ``tp``, parameters on the meta device (the check needs the model
    built with real tensors, e.g. on CPU). If an attention only matches after dividing an int
    attribute of its module by ``tp`` (a head count in a ``view``), the unit is ready with that
    ``head_attr``.

    ``sample``: the model's forward arguments; each unit then runs on the input it really gets.
    Without it each unit's module gets a synthetic ``(2, 8, d)`` input (d: the projections'
    input width), which suits (batch, sequence, hidden) blocks; a module that needs more
    (a mask, rotary tables) is refused with the error, and a sample fixes it. The copies run
    in eval mode with seeded random projection weights (dropout and the model's own values,
    e.g. a zero-initialised output projection, cannot hide a mismatch); the model is unchanged.
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if tp == 1:
        return list(units), []
    inputs = _captured_inputs(model, units, sample) if sample is not None else {}
    ready: list[TpUnit] = []
    refused: list[str] = []
    for unit in units:
        why = _static_refusal(model, unit, tp)
        if why is None:
            result = _check_unit(model, unit, tp, inputs.get(unit.module))
            if isinstance(result, TpUnit):
                ready.append(result)
                continue
            why = result
        refused.append(f"{unit.module}: {why}")
    return ready, refused


_Call = tuple[tuple[Any, ...], dict[str, Any]]


def _captured_inputs(
    model: nn.Module, units: Sequence[TpUnit], sample: Sample
) -> dict[str, _Call | str]:
    """Each unit module's first input when the model runs ``sample`` (or why there is none)."""
    got: dict[str, _Call | str] = {}
    hooks = []
    for name in {u.module for u in units}:

        def keep(_m: nn.Module, args: Any, kwargs: Any, name: str = name) -> None:
            got.setdefault(name, (tuple(args), dict(kwargs)))

        hooks.append(model.get_submodule(name).register_forward_pre_hook(keep, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*sample)
    except Exception as err:  # reported per unit
        failed = f"running the model on the sample failed ({_one_line(err)})"
        return {u.module: got.get(u.module, failed) for u in units}
    finally:
        for h in hooks:
            h.remove()
    return got


def _static_refusal(model: nn.Module, unit: TpUnit, tp: int) -> str | None:
    """Why ``unit`` cannot be split, from its Linears alone (None: go on to the simulation)."""
    if unit.kind == "attention" and len(unit.colwise) < 3:
        return FUSED_QKV
    for fqn in unit.colwise:
        lin = _linear(model, fqn)
        if lin.out_features % tp:
            return f"{fqn} has {lin.out_features} output features, not divisible by tp={tp}"
    for fqn in unit.rowwise:
        lin = _linear(model, fqn)
        if lin.in_features % tp:
            return f"{fqn} has {lin.in_features} input features, not divisible by tp={tp}"
    owner = model.get_submodule(unit.module)
    tensors = [*owner.parameters(), *owner.buffers()]
    if any(t.is_meta for t in tensors):
        return (
            "parameters on the meta device: the readiness check runs the shards, "
            "so it needs the model built with real tensors (e.g. on CPU)"
        )
    return None


def _linear(model: nn.Module, fqn: str) -> nn.Linear:
    mod = model.get_submodule(fqn)
    if not isinstance(mod, nn.Linear):
        raise TypeError(f"{fqn} is a {type(mod).__name__}, not an nn.Linear")
    return mod


def _check_unit(model: nn.Module, unit: TpUnit, tp: int, call: _Call | str | None) -> TpUnit | str:
    """The unit (with ``head_attr`` if one was needed) if its shards match, else why not."""
    owner = model.get_submodule(unit.module)
    local = _relative(unit)
    if isinstance(call, str):
        return call
    if call is None:
        call = _synthetic_call(model, unit)
    why = _simulate(owner, local, tp, call, None)
    if why is None:
        return unit
    if unit.kind == "attention":
        for attr in _head_candidates(owner, tp):
            if _simulate(owner, local, tp, call, attr) is None:
                return dataclasses.replace(unit, head_attr=attr)
    return f"{unit.kind} not ready for tp={tp} ({why})"


def _relative(unit: TpUnit) -> TpUnit:
    """``unit`` with its Linears named relative to its module (to find them in a copy)."""
    cut = len(unit.module) + 1 if unit.module else 0
    return dataclasses.replace(
        unit,
        module="",
        colwise=tuple(f[cut:] for f in unit.colwise),
        rowwise=tuple(f[cut:] for f in unit.rowwise),
    )


def _synthetic_call(model: nn.Module, unit: TpUnit) -> _Call:
    """A seeded ``(2, 8, d)`` input on the first projection's device and dtype."""
    lin = _linear(model, unit.colwise[0])
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn((*SYNTHETIC_SHAPE, lin.in_features), generator=gen)
    return (x.to(device=lin.weight.device, dtype=lin.weight.dtype),), {}


def _simulate(
    owner: nn.Module, unit: TpUnit, tp: int, call: _Call, head_attr: str | None
) -> str | None:
    """None if every rank's shard, all-reduced at the rowwise projections, gives the unsharded
    output; else the error or the mismatch, in one line."""
    base = copy.deepcopy(owner).eval()
    _randomise(base, (*unit.colwise, *unit.rowwise))
    args, kwargs = call
    try:
        with torch.no_grad():
            ref = base(*args, **kwargs)
            shards = [_shard(base, unit, tp, r, head_attr) for r in range(tp)]
            partial = [_rowwise_outputs(m, unit, call) for m in shards]
            reduced = {k: [sum(p[k][i] for p in partial) for i in range(len(v))]
                       for k, v in partial[0].items()}  # fmt: skip
            outs = [_with_outputs(m, reduced, call) for m in shards]
    except Exception as err:  # the reason the unit is refused
        return _one_line(err)
    worst = max(_relative_error(out, ref) for out in outs)
    if worst > _tolerance(ref):
        return f"the sharded result differs from the unsharded one (relative error {worst:.1e})"
    return None


def _randomise(module: nn.Module, linears: Iterable[str]) -> None:
    """Seeded random weights and biases (scale 1/sqrt(in)) for the unit's projections."""
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for fqn in linears:
            lin = module.get_submodule(fqn)
            for p in (lin.weight, lin.bias):
                if p is not None:
                    value = torch.randn(p.shape, generator=gen) / lin.in_features**0.5
                    p.copy_(value.to(p))


def _shard(base: nn.Module, unit: TpUnit, tp: int, rank: int, head_attr: str | None) -> nn.Module:
    """Rank ``rank``'s copy: colwise Linears keep their output rows ``rank``, rowwise ones their
    input columns ``rank`` (bias on rank 0 only: the all-reduce adds it once)."""
    m = copy.deepcopy(base)
    if head_attr is not None:
        setattr(m, head_attr, getattr(m, head_attr) // tp)
    for fqn in unit.colwise:
        lin = m.get_submodule(fqn)
        k = lin.out_features // tp
        rows = slice(rank * k, (rank + 1) * k)
        lin.weight = nn.Parameter(lin.weight[rows].clone())
        if lin.bias is not None:
            lin.bias = nn.Parameter(lin.bias[rows].clone())
        lin.out_features = k
    for fqn in unit.rowwise:
        lin = m.get_submodule(fqn)
        k = lin.in_features // tp
        lin.weight = nn.Parameter(lin.weight[:, rank * k : (rank + 1) * k].clone())
        if lin.bias is not None and rank > 0:
            lin.bias = nn.Parameter(torch.zeros_like(lin.bias))
        lin.in_features = k
    return m


def _rowwise_outputs(m: nn.Module, unit: TpUnit, call: _Call) -> dict[str, list[torch.Tensor]]:
    """The partial output of each rowwise projection, per call, when ``m`` runs ``call``."""
    outs: dict[str, list[torch.Tensor]] = {fqn: [] for fqn in unit.rowwise}

    def keep(fqn: str, out: torch.Tensor) -> None:
        outs[fqn].append(out)

    with _hooks(m, unit.rowwise, keep):
        m(*call[0], **call[1])
    if any(not v for v in outs.values()):
        raise RuntimeError("the output projection does not run in the module's forward")
    return outs


def _with_outputs(m: nn.Module, reduced: Mapping[str, list[torch.Tensor]], call: _Call) -> Any:
    """``m``'s output when each rowwise projection returns the all-reduced value."""
    seen: dict[str, int] = dict.fromkeys(reduced, 0)

    def replace(fqn: str, _out: torch.Tensor) -> torch.Tensor:
        seen[fqn] += 1
        return reduced[fqn][seen[fqn] - 1]

    with _hooks(m, reduced, replace):
        return m(*call[0], **call[1])


@contextlib.contextmanager
def _hooks(
    m: nn.Module, names: Iterable[str], fn: Callable[[str, torch.Tensor], Any]
) -> Iterator[None]:
    """Forward hooks ``fn(fqn, output)`` on the named submodules for the ``with`` block (a
    non-None return replaces the output)."""
    handles = [
        m.get_submodule(fqn).register_forward_hook(lambda _m, _a, out, fqn=fqn: fn(fqn, out))
        for fqn in names
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, tuple | list):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _tensors(item)


def _relative_error(out: Any, ref: Any) -> float:
    """Largest difference over the outputs' tensors, relative to the reference's magnitude."""
    got, want = list(_tensors(out)), list(_tensors(ref))
    if len(got) != len(want) or any(a.shape != b.shape for a, b in zip(got, want, strict=True)):
        return float("inf")
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        if not b.is_floating_point():
            worst = max(worst, 0.0 if torch.equal(a, b) else float("inf"))
            continue
        scale = float(b.abs().max()) if b.numel() else 0.0
        diff = float((a - b).abs().max()) if b.numel() else 0.0
        worst = max(worst, diff / max(scale, 1e-12))
    return worst


def _tolerance(ref: Any) -> float:
    """Relative error accepted: summation order only (1e-5 in fp32, ~6e-2 in bf16)."""
    dtypes = [t.dtype for t in _tensors(ref) if t.is_floating_point()]
    eps = max((torch.finfo(d).eps for d in dtypes), default=0.0)
    return max(1e-5, 8 * eps)


def _head_candidates(owner: nn.Module, tp: int) -> list[str]:
    """Int attributes of ``owner`` whose value is a literal size in a ``view``/``reshape`` of its
    traced forward and divides by ``tp``: the head count a torchtitan-style attention bakes in
    (``view(b, t, self.n_heads, head_dim)``). Tried one by one; the simulation decides."""
    try:
        graph = _Tracer().trace(owner)
    except Exception:  # no trace, no candidates
        return []
    sizes: set[int] = set()
    for node in graph.nodes:
        if _is(node, _RESHAPE_FUNCS, _RESHAPE_METHODS):
            sizes |= set(_ints(node.args[1:]))
    return [
        name
        for name, value in vars(owner).items()
        if type(value) is int and value in sizes and value % tp == 0 and value >= tp
    ]


def _ints(args: Any) -> Iterator[int]:
    if type(args) is int:
        yield args
    elif isinstance(args, tuple | list):
        for a in args:
            yield from _ints(a)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


# --- vocabulary and layout ---------------------------------------------------------------------


def find_vocab_pair(model: nn.Module) -> VocabPair | None:
    """The embedding over the vocabulary and its output head, by weight identity and shape.

    An Embedding whose weight is also a Linear's weight is a tied pair (GPT-2). Otherwise the
    vocabulary embedding is the one the model calls on one of its inputs (fx trace of the whole
    model; position and token-type tables are called on ``arange``/``zeros_like``), or, when
    that cannot tell, the largest; its head is the last registered Linear ``dim -> vocab``
    (None if there is none: a classifier). None without embeddings.
    """
    embeddings = {n: m for n, m in model.named_modules() if isinstance(m, nn.Embedding)}
    if not embeddings:
        return None
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, emb in embeddings.items():
        for head, lin in linears:
            if lin.weight is emb.weight:
                return VocabPair(embedding=name, head=head, tied=True)
    fed = _embeddings_on_inputs(model)
    name = fed[0] if len(fed) == 1 else max(embeddings, key=lambda n: embeddings[n].num_embeddings)
    emb = embeddings[name]
    heads = [
        n
        for n, lin in linears
        if (lin.in_features, lin.out_features) == (emb.embedding_dim, emb.num_embeddings)
    ]
    return VocabPair(embedding=name, head=heads[-1] if heads else None, tied=False)


def _embeddings_on_inputs(model: nn.Module) -> list[str]:
    """Embeddings called on a model input (through shape ops only); [] if fx cannot trace it."""
    try:
        graph = _Tracer().trace(model)
    except Exception:  # untraceable model: the caller falls back to sizes
        return []
    g = _Graph(graph, model)
    found: list[str] = []
    for node in graph.nodes:
        if not isinstance(g.module(node), nn.Embedding) or not node.args:
            continue
        src = node.args[0]
        while isinstance(src, fx.Node) and _is_shape(src) and src.args:
            src = src.args[0]
        if isinstance(src, fx.Node) and src.op == "placeholder" and node.target not in found:
            found.append(str(node.target))
    return found


def tp_layout(
    model: nn.Module, layers: Sequence[str], tp: int, sample: Sample | None = None
) -> TpLayout:
    """The units of ``layers`` found and checked at ``tp`` (:func:`find_tp_units`,
    :func:`check_tp_units`, which needs real tensors), and the vocabulary pair if its size
    divides by ``tp``."""
    ready, refused = check_tp_units(model, find_tp_units(model, layers), tp, sample)
    vocab = find_vocab_pair(model)
    if vocab is not None:
        emb = model.get_submodule(vocab.embedding)
        if not isinstance(emb, nn.Embedding) or emb.num_embeddings % tp:
            vocab = None
    split = [lin for u in ready for lin in (*u.colwise, *u.rowwise)]
    if vocab is not None and vocab.head is not None:
        split.append(vocab.head)
    biased = frozenset(f for f in split if _linear(model, f).bias is not None)
    return TpLayout(tp=tp, units=tuple(ready), refused=tuple(refused), vocab=vocab, biased=biased)
