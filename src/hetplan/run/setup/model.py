"""What the runtime needs from a model: a seeded build, synthetic batches and a loss.

A :class:`ModelSource` is picklable (it travels to every rank) and rebuilds the same model and
the same data in every process from a seed, so that a single-process reference can rebuild the
global batch. :class:`ZooSource` adapts :mod:`hetplan.graph` (zoo names, ``file.py:fn``,
``package.module:fn``); :class:`MLPSource` is a tiny self-contained model for tests and smoke
runs. Pipeline stages are cut from the model's traced forward (:mod:`hetplan.graph.split`);
:meth:`ModelSource.build_part` materialises only the parameters a stage reads.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from hetplan.errors import InputError, ModelError
from hetplan.graph import build_module, loss_function, resolve_model, synthetic_batch
from hetplan.graph.extract import select_layers
from hetplan.graph.meta import build_on_meta
from hetplan.graph.split import execution_order
from hetplan.planspec import ModelRef
from hetplan.run.setup.materialize import record
from hetplan.run.setup.precision import PRECISIONS


class ModelSource(Protocol):
    """A model the runtime can build, feed and score in any process."""

    def build(self, seed: int, device: str) -> nn.Module:
        """The full model, parameters seeded by ``seed`` (the single-process reference)."""
        ...

    def build_meta(self) -> nn.Module:
        """The model on the meta device (structure only, no memory)."""
        ...

    def build_part(self, seed: int, device: str, names: list[str]) -> nn.Module:
        """The model with (at least) the parameters and buffers ``names`` materialised on
        ``device``, with the values :meth:`build` gives them; the rest may stay on meta."""
        ...

    def batch(self, n: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` synthetic samples ``(inputs, targets)``, the same for the same seed."""
        ...

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Loss averaged over the samples of ``output``."""
        ...


@dataclass(frozen=True, kw_only=True)
class MLPSource:
    """A small multi-layer perceptron classifier: ``fc0, act0, fc1, act1, ..., head``."""

    widths: tuple[int, ...] = (8, 16, 16, 4)
    """Input features, hidden widths, classes."""

    def build(self, seed: int, device: str) -> nn.Module:
        torch.manual_seed(seed)
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        pairs = list(zip(self.widths[:-1], self.widths[1:], strict=True))
        for i, (a, b) in enumerate(pairs[:-1]):
            layers[f"fc{i}"] = nn.Linear(a, b)
            layers[f"act{i}"] = nn.Tanh()
        layers["head"] = nn.Linear(*pairs[-1])
        return nn.Sequential(layers).to(device)

    def build_meta(self) -> nn.Module:
        return build_meta_by_build(self)

    def build_part(self, seed: int, device: str, names: list[str]) -> nn.Module:
        return self.build(seed, device)  # no deferred init: built whole (tests only)

    def batch(self, n: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(n, self.widths[0], generator=gen)
        y = torch.randint(0, self.widths[-1], (n,), generator=gen)
        return x.to(device), y.to(device)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)


@dataclass(frozen=True, kw_only=True)
class ZooSource:
    """A model resolved by :func:`hetplan.graph.resolve_model` (zoo, file or module function)."""

    name: str
    dataset: str | None = None

    def _built(self) -> Any:
        return resolve_model(self.name, self.dataset)

    def build(self, seed: int, device: str) -> nn.Module:
        return self.build_part(seed, device, None)

    def build_meta(self) -> nn.Module:
        return build_on_meta(self._built().factory).train()

    def build_part(self, seed: int, device: str, names: list[str] | None) -> nn.Module:
        """Deferred initialisation (:mod:`hetplan.run.setup.materialize`): only ``names`` are
        allocated, with the values of the whole model's; fp32 master weights whatever the
        training dtype (autocast runs the low precision). A model whose initialisation cannot
        be replayed is built whole instead (seeded, values as ``torch.manual_seed`` gives)."""
        try:
            return record(self._built().factory).materialize(names, device, seed).train()
        except ModelError:
            return build_module(self._built(), device, seed)

    def batch(self, n: int, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = synthetic_batch(self._built(), n, device, seed)
        return x, y

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = loss_function(self._built())(output, target)
        return out


def source_for(model: ModelRef) -> ZooSource:
    """The source of a plan's model."""
    if model.dtype not in PRECISIONS:
        raise InputError(f"model.dtype: {model.dtype!r} is not one of {', '.join(PRECISIONS)}")
    return ZooSource(name=model.name, dataset=model.dataset)  # precision: the plan's


def build_meta_by_build(source: ModelSource) -> nn.Module:
    """``source.build`` on the meta device (for sources without a factory of their own)."""
    with torch.device("meta"):
        return source.build(0, "meta")


def layer_names(source: ModelSource, depth: int = 1) -> list[str]:
    """The model's layers at ``depth`` in the order its forward runs them (the graph's layers,
    what ``hetplan inspect`` lists), built on meta."""
    model = source.build_meta()
    return execution_order(model, [name for name, _ in select_layers(model, depth)])


def data_seed(seed: int, step: int, pipeline: int) -> int:
    """Seed of pipeline ``pipeline``'s samples at ``step`` (the reference rebuilds the same)."""
    return seed * 1_000_003 + step * 1_009 + pipeline


def shared_parameters(model: nn.Module) -> list[list[str]]:
    """Names of each parameter that the model holds under several names (tied weights, e.g.
    GPT-2's embedding and output projection), in registration order; the first name is the
    one ``named_parameters()`` reports."""
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def canonical_names(model: nn.Module) -> dict[str, str]:
    """Every parameter name -> the name ``named_parameters()`` reports for that tensor."""
    out: dict[str, str] = {}
    for names in shared_parameters(model):
        for name in names:
            out[name] = names[0]
    return out
