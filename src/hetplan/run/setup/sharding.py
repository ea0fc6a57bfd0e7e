"""Sharded data parallelism with torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each rank holds the whole model's program on its batch share; every layer of the plan is one
FSDP2 group (parameters gathered before its forward and, under ZeRO-3, again before its
backward; gradients reduce-scattered after it), and the root module is a last group holding
what no layer owns alone (glue parameters, weights tied across layers: FSDP2 needs a shared
parameter inside one group). The shards are FSDP2's: dim-0 chunks padded to the first
(:mod:`hetplan.cost.sharded`), so every rank holds the same bytes whatever its memory.

Each rank scales its loss by its share of the global batch (the executor), so the gradients
are *summed* over ranks (``set_gradient_divide_factor(1)``), not averaged: uneven batch
shares give the gradient of the global-batch mean, as data parallelism does. gloo runs
FSDP2's ``all_gather_single`` and ``reduce_scatter_single`` on CPU (checked on torch 2.13).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from hetplan.run.setup.model import ModelSource

try:  # torch >= 2.6; earlier the composable API (FSDP2 since torch 2.4)
    from torch.distributed.fsdp import FSDPModule, fully_shard
except ImportError:  # pragma: no cover - torch 2.4/2.5
    from torch.distributed._composable.fsdp import (  # type: ignore[no-redef]
        FSDPModule,
        fully_shard,
    )


def shared_layers(module: nn.Module, layers: Sequence[str]) -> set[str]:
    """Layers holding a parameter that another layer also uses (a tied weight): left to the
    root group."""
    uses: Counter[int] = Counter()
    for name in layers:
        for p in set(module.get_submodule(name).parameters()):
            uses[id(p)] += 1
    return {
        name
        for name in layers
        if any(uses[id(p)] > 1 for p in module.get_submodule(name).parameters())
    }


def shard_stage(
    module: nn.Module, layers: Sequence[str], mesh: DeviceMesh, *, zero: int
) -> list[str]:
    """Wrap each of ``layers`` (submodule names of ``module``) and then ``module`` itself in
    FSDP2 over ``mesh``; return the layers left to the root group."""
    left = shared_layers(module, layers)
    again = zero == 3  # ZeRO-3 frees the gathered layer after forward, gathers it again
    for name in layers:
        sub = module.get_submodule(name)
        if name not in left and any(True for _ in sub.parameters()):
            fully_shard(sub, mesh=mesh, reshard_after_forward=again)
    fully_shard(module, mesh=mesh, reshard_after_forward=again)
    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            # gloo has no PREMUL_SUM (FSDP2's choice for a divide factor): plain sums
            m.set_force_sum_reduction_for_comms(True)
    return sorted(left)


def fill_shards(module: nn.Module, source: ModelSource, seed: int, device: str, group: Any) -> int:
    """Give ``module`` (sharded on meta by :func:`shard_stage`) its values: allocate the
    shards (``to_empty``), then materialise the model's tensors a chunk at a time
    (``source.build_part``: the values :meth:`ModelSource.build` gives them), each chunk at
    most a rank's share of the model's bytes or its largest tensor, and copy each rank's rows
    into its shard (buffers whole). Returns the most bytes materialised at once, so that the
    set-up never holds a whole replica."""
    module.to_empty(device=device)
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    targets = dict(module.named_parameters()) | dict(module.named_buffers())
    sizes = {name: _full_bytes(t) for name, t in targets.items()}
    budget = max(max(sizes.values(), default=0), sum(sizes.values()) // n)
    most = 0
    with torch.no_grad():
        for chunk in _chunks(list(targets), sizes, budget):
            part = source.build_part(seed, device, chunk)
            most = max(most, sum(sizes[name] for name in chunk))
            for name in chunk:
                _copy_rows(targets[name], _tensor(part, name), n, rank)
            del part
    return most


def _full_bytes(t: torch.Tensor) -> int:
    """Bytes of the whole (unsharded) tensor."""
    return int(t.numel() * t.element_size())  # a DTensor's numel is the global one


def _chunks(names: list[str], sizes: dict[str, int], budget: int) -> list[list[str]]:
    """``names`` in order, cut into runs of at most ``budget`` bytes (a larger one alone)."""
    out: list[list[str]] = [[]]
    used = 0
    for name in names:
        if out[-1] and used + sizes[name] > budget:
            out.append([])
            used = 0
        out[-1].append(name)
        used += sizes[name]
    return [c for c in out if c]


def _tensor(module: nn.Module, name: str) -> torch.Tensor:
    prefix, _, leaf = name.rpartition(".")
    owner = module.get_submodule(prefix)
    found: torch.Tensor = getattr(owner, leaf)
    return found


def _copy_rows(target: torch.Tensor, full: torch.Tensor, n: int, rank: int) -> None:
    """Rank ``rank``'s dim-0 piece of ``full`` (``torch.chunk``, as FSDP2 cuts) into its
    shard; a plain tensor (a buffer) whole."""
    if not isinstance(target, DTensor):
        target.copy_(full)
        return
    pieces = torch.chunk(full.detach(), n, dim=0)
    if rank < len(pieces):
        target.to_local().copy_(pieces[rank])
