"""Pipeline stages cut from the model's traced forward program, not from its list of children.

The model is traced with :mod:`torch.fx` keeping the graph's *layers* (the modules at the
plan's depth, :func:`hetplan.graph.extract.select_layers`) as leaf calls, so the program is the
model's real ``forward()``: skip connections, modules called more than once, tied weights and
tuple/dict values are nodes and edges of it. Each node is given to a stage by the same rule
the graph extractor prices it with (:mod:`hetplan.graph.extract`): a layer's first call goes to
the stage holding that layer; everything else (glue code, a layer called again after later
layers) runs where the last layer before it ran. Every value produced at or before stage ``k``
and used after it crosses the cut after stage ``k``: exactly what ``graph.cut_bytes`` counts.

Stage ``k``'s program takes the values crossing cut ``k - 1`` (the model's inputs for stage 0)
and returns those crossing cut ``k`` (the model's output for the last stage). Each is an
``fx.GraphModule`` over the *same* submodule objects as the model, so parameter names are the
model's FQNs; a parameter read by several stages (tied weights) is listed in :attr:`ties`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from hetplan.errors import InputError

# Not wrapped in a module: the name of the model's input placeholders in stage programs.


class _LayerTracer(fx.Tracer):  # type: ignore[misc]
    """Traces through everything except the graph's layers, which stay calls."""

    def __init__(self, layers: set[str]) -> None:
        super().__init__()
        self.layers = layers

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return module_qualified_name in self.layers


@dataclass(frozen=True, kw_only=True)
class StageProgram:
    """One stage's part of the forward program."""

    module: fx.GraphModule
    inputs: tuple[str, ...]
    """Names of the values it receives (the model's inputs for stage 0), in call order."""
    outputs: tuple[str, ...]
    """Names of the values it sends on; empty for the last stage (it returns the model's
    output)."""
    state_names: tuple[str, ...]
    """FQNs of every parameter and buffer the stage reads (aliases of a tied weight included)."""


@dataclass(frozen=True, kw_only=True)
class SplitProgram:
    stages: tuple[StageProgram, ...]
    ties: tuple[tuple[int, ...], ...]
    """For each parameter read by several stages: the stages, in order (see :attr:`tie_names`)."""
    tie_names: tuple[dict[int, str], ...]
    """For each tie: stage -> the parameter's name in that stage's program."""


def trace_program(model: nn.Module, layers: Sequence[str]) -> fx.GraphModule:
    """The model's forward with ``layers`` kept as calls; InputError if it cannot be traced."""
    tracer = _LayerTracer(set(layers))
    try:
        graph = tracer.trace(model)
    except Exception as err:  # fx raises many types for data-dependent Python
        text = " ".join(str(err).split())[:200]
        raise InputError(
            f"model {type(model).__name__}: its forward cannot be traced into stages "
            f"({type(err).__name__}: {text}); run it with strategy dp"
        ) from None
    return fx.GraphModule(model, graph)


def execution_order(model: nn.Module, layers: Sequence[str]) -> list[str]:
    """``layers`` in the order the forward first calls them (the graph's layer order); layers
    it never calls are left out, as the graph leaves them out."""
    program = trace_program(model, layers)
    order: list[str] = []
    wanted = set(layers)
    for node in program.graph.nodes:
        if node.op == "call_module" and node.target in wanted and node.target not in order:
            order.append(str(node.target))
    return order


def split_problem(model: nn.Module, layers: Sequence[str]) -> str | None:
    """Why ``model`` cannot be cut between its ``layers`` (in the graph's order), or None."""
    try:
        order = execution_order(model, layers)
    except InputError as err:
        return str(err)
    if order != list(layers):
        diff = [b for a, b in zip([*order, None], layers, strict=False) if a != b]
        return (
            f"layer {diff[0]}: the traced forward (torch.fx) does not call the layers in the "
            "order they ran; run it with strategy dp"
        )
    return None


def _assign(program: fx.GraphModule, stage_of_layer: dict[str, int]) -> dict[fx.Node, int]:
    """Stage of every node except ``get_attr`` (those are copied into each stage reading them)."""
    where: dict[fx.Node, int] = {}
    cur = 0
    called: set[str] = set()
    for node in program.graph.nodes:
        if node.op == "get_attr":
            continue
        if node.op == "call_module" and node.target in stage_of_layer and node.target not in called:
            called.add(node.target)
            stage = stage_of_layer[node.target]
            if stage < cur:
                raise InputError(
                    f"layer {node.target}: runs after layers of stage {cur} but is planned in "
                    f"stage {stage}; stages must follow the order the forward runs layers in"
                )
            cur = stage
        where[node] = 0 if node.op == "placeholder" else cur
    missing = sorted(set(stage_of_layer) - called)
    if missing:
        raise InputError(
            f"layer {missing[0]}: never called by the model's forward, so it cannot hold a "
            "stage boundary; plan the layers `hetplan inspect` lists"
        )
    return where


def _crossing(where: dict[fx.Node, int], num: int) -> list[list[fx.Node]]:
    """Values crossing the cut after each stage, in program order."""
    cuts: list[list[fx.Node]] = [[] for _ in range(num - 1)]
    for node, stage in where.items():
        if node.op == "output":
            continue
        last = max((where[u] for u in node.users if u in where), default=stage)
        for k in range(stage, min(last, num - 1)):
            cuts[k].append(node)
    return cuts


def split_program(model: nn.Module, stages: Sequence[Sequence[str]]) -> SplitProgram:
    """Cut ``model``'s forward into the planned stages (lists of layer FQNs, in order)."""
    stage_of = {name: k for k, names in enumerate(stages) for name in names}
    program = trace_program(model, list(stage_of))
    where = _assign(program, stage_of)
    cuts = _crossing(where, len(stages))
    built: list[StageProgram] = []
    for k in range(len(stages)):
        inputs = cuts[k - 1] if k > 0 else [n for n in where if n.op == "placeholder"]
        outputs = cuts[k] if k < len(stages) - 1 else None
        built.append(_stage_module(model, program, where, k, inputs, outputs))
    ties, names = _ties(built)
    return SplitProgram(stages=tuple(built), ties=ties, tie_names=names)


def _stage_module(
    model: nn.Module,
    program: fx.GraphModule,
    where: dict[fx.Node, int],
    k: int,
    inputs: list[fx.Node],
    outputs: list[fx.Node] | None,
) -> StageProgram:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        if k == 0 and node.op == "placeholder":  # keeps the forward's default values
            env[node] = graph.node_copy(node)
        else:
            env[node] = graph.placeholder(node.name)

    def arg(n: fx.Node) -> fx.Node:
        if n not in env and n.op == "get_attr":
            env[n] = graph.node_copy(n)
        return env[n]

    for node in program.graph.nodes:
        if where.get(node) != k or node.op == "placeholder":
            continue
        if node.op == "output":
            graph.output(fx.map_arg(node.args[0], arg))
        else:
            env[node] = graph.node_copy(node, arg)
    if outputs is not None:
        graph.output(tuple(arg(n) for n in outputs))
    graph.lint()
    module = fx.GraphModule(model, graph)
    return StageProgram(
        module=module,
        inputs=tuple(n.name for n in inputs),
        outputs=tuple(n.name for n in outputs or ()),
        state_names=_state_names(graph),
    )


def _state_names(graph: fx.Graph) -> tuple[str, ...]:
    """FQN prefixes of the state a stage reads: its layer calls and attribute reads."""
    out: list[str] = []
    for node in graph.nodes:
        if node.op in ("call_module", "get_attr") and node.target not in out:
            out.append(str(node.target))
    return tuple(out)


def _ties(
    stages: list[StageProgram],
) -> tuple[tuple[tuple[int, ...], ...], tuple[dict[int, str], ...]]:
    by_id: dict[int, dict[int, str]] = {}
    for k, st in enumerate(stages):
        for name, p in st.module.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), {}).setdefault(k, name)
    shared = [where for where in by_id.values() if len(where) > 1]
    return tuple(tuple(sorted(w)) for w in shared), tuple(shared)


def stage_state(model: nn.Module, prefixes: Sequence[str]) -> list[str]:
    """FQNs (every alias) of the parameters and buffers under ``prefixes`` in ``model``."""
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    names += [n for n, _ in model.named_buffers(remove_duplicate=False)]
    return [n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)]


def values_of(out: Any) -> list[torch.Tensor]:
    """The tensors of a (nested) value, in pytree order."""
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
