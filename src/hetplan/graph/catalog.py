"""A summary of every zoo model (``hetplan models``)."""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.graph.meta import build_on_meta
from hetplan.graph.resolve import resolve_model
from hetplan.graph.zoo import ZOO


@dataclass(frozen=True, kw_only=True)
class ModelSummary:
    name: str
    family: str
    description: str
    params: int
    """Trainable parameters at the default dataset (tied tensors counted once)."""
    dataset: str | None
    """Default dataset preset (None: language models)."""
    input_shape: tuple[int, ...]
    input_dtype: str


def summarize(name: str) -> ModelSummary:
    """Summary of one zoo model, built on the meta device (no memory, no weights)."""
    entry = ZOO[name]
    built = resolve_model(name)
    module = build_on_meta(built.factory)
    params = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return ModelSummary(
        name=name,
        family=entry.family,
        description=entry.description,
        params=params,
        dataset=built.dataset,
        input_shape=built.input_shape,
        input_dtype=str(built.input_dtype).removeprefix("torch."),
    )


def list_models() -> list[ModelSummary]:
    """Every zoo model, in registry order."""
    return [summarize(name) for name in ZOO]
