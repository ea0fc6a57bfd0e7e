"""Tensor parallelism inside a stage, Megatron-style, with ``torch.distributed.tensor.parallel``.

The units come from the model's structure (:mod:`hetplan.graph.tp_units`, checked in one
process before any rank starts): in each attention the q/k/v projections are split by output
features (``ColwiseParallel``: each rank holds whole heads) and the output projection by input
features (``RowwiseParallel``: one all-reduce of the block's output forward); in each MLP the
up (and gate) projections colwise and the down projection rowwise. The embedding over the
vocabulary is split by rows (``RowwiseParallel(input_layouts=Replicate())``: one all-reduce
forward) and the output head by columns with the logits left sharded; the loss runs under
``loss_parallel()`` (forward and backward), so the logits are never gathered. Everything else
is replicated: each shard computes it whole.

Shards are cut locally from the seeded full weights every rank builds (``src_data_rank=None``:
no communication at setup). Values crossing a stage cut stay plain replicated tensors, so
shard ``t`` of a stage exchanges them with shard ``t`` of the next. Gradients of sharded
tensors are synchronised across data-parallel replicas shard by shard (each rank's local part,
over the group of ranks with its shard index), and replicated tensors the same way (their
gradients are identical on every shard of a stage).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    loss_parallel,
    parallelize_module,
)

from hetplan.errors import InputError
from hetplan.graph.tp_units import TpLayout, tp_layout
from hetplan.planspec import Plan


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``t`` (itself unless a DTensor)."""
    return t.to_local() if isinstance(t, DTensor) else t


def layout_for(plan: Plan, model: nn.Module, layers: Sequence[str]) -> TpLayout | None:
    """The plan's tensor-parallel layout of ``model`` (real tensors: the readiness check runs
    the shards in one process); InputError when tp > 1 finds nothing to split."""
    if plan.tp == 1:
        return None
    layout = tp_layout(model, layers, plan.tp)
    if not layout.units and layout.vocab is None:
        why = f" ({layout.refused[0]})" if layout.refused else ""
        raise InputError(
            f"tp: {plan.model.name} has no block tensor parallelism can split{why}; expected "
            "attention with separate q/k/v Linear layers or a Linear-activation-Linear MLP"
        )
    return layout


def local_bytes(numel: int, itemsize: int, sharded: bool, tp: int) -> int:
    """Bytes of a rank's part of a parameter of ``numel`` elements (split over ``tp`` ranks
    if ``sharded``)."""
    return (-(-numel // tp) if sharded else numel) * itemsize


def _in(fqn: str, prefixes: Sequence[str]) -> bool:
    return any(fqn == p or fqn.startswith(p + ".") for p in prefixes)


def parallelize_stage(
    root: nn.Module, layers: Sequence[str], layout: TpLayout, mesh: DeviceMesh
) -> bool:
    """Split the stage's units over ``mesh`` in place; True if the stage computes the logits
    sharded (its loss must run under :func:`loss_context`)."""
    tp = mesh.size()
    for unit in layout.units:
        if _in(unit.module, layers) and unit.head_attr is not None:
            owner = root.get_submodule(unit.module)
            setattr(owner, unit.head_attr, getattr(owner, unit.head_attr) // tp)
    styles = _styles(layout, layers)
    parallelize_module(root, mesh, styles)
    vocab = layout.vocab
    if vocab is None:
        return False
    both = vocab.head is not None and _in(vocab.head, layers) and _in(vocab.embedding, layers)
    if vocab.tied and both and vocab.head is not None:  # parallelize_module unties
        emb = root.get_submodule(vocab.embedding)
        root.get_submodule(vocab.head).weight = emb.weight
    elif _in(vocab.embedding, layers):
        _shard_embedding_grad(root.get_submodule(vocab.embedding))
    return vocab.head is not None and _in(vocab.head, layers)


def _styles(layout: TpLayout, layers: Sequence[str]) -> dict[str, ParallelStyle]:
    styles: dict[str, ParallelStyle] = {}
    for unit in layout.units:
        if _in(unit.module, layers):
            styles.update((fqn, ColwiseParallel()) for fqn in unit.colwise)
            styles.update((fqn, RowwiseParallel()) for fqn in unit.rowwise)
    vocab = layout.vocab
    if vocab is not None and _in(vocab.embedding, layers):
        styles[vocab.embedding] = RowwiseParallel(input_layouts=Replicate())
    if vocab is not None and vocab.head is not None and _in(vocab.head, layers):
        styles[vocab.head] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    for style in styles.values():
        style.src_data_rank = None  # every rank holds the same seeded weights: slice locally
    return styles


def _shard_embedding_grad(emb: nn.Module) -> None:
    """A vocabulary-split embedding's weight gradient arrives replicated at full size (torch
    2.13); re-shard it like the weight (a local slice, no communication)."""
    weight = emb.weight
    if isinstance(weight, DTensor):
        placements = weight.placements

        def reshard(p: torch.Tensor) -> None:
            if isinstance(p.grad, DTensor) and p.grad.placements != placements:
                p.grad = p.grad.redistribute(placements=placements)

        weight.register_post_accumulate_grad_hook(reshard)


@contextlib.contextmanager
def loss_context(enabled: bool) -> Iterator[None]:
    """``loss_parallel()`` around a sharded-logits stage's forward and backward."""
    if not enabled:
        yield
        return
    with loss_parallel():
        yield


def mesh_of(group: Any, device: str) -> DeviceMesh:
    """The tensor-parallel mesh over the stage's process group."""
    return DeviceMesh.from_group(group, "cuda" if device.startswith("cuda") else "cpu")
