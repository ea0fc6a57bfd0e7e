"""A summary of every zoo model (``hetplan models``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hetplan
from hetplan.graph.cache import cache_dir, source_hash

# The zoo, the tracer and torch load only when the list is not cached (see list_models).
# ruff: noqa: PLC0415


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
    from hetplan.graph.meta import build_on_meta
    from hetplan.graph.resolve import resolve_model
    from hetplan.graph.zoo import ZOO

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
    """Every zoo model, in registry order. Building them all on the meta device takes seconds
    (torch's import alone ~2 s), so the list is cached next to the graphs, keyed by the
    graph package's source: a change to the zoo rebuilds it."""
    folder = cache_dir()
    path = folder / f"models-{hetplan.__version__}-{source_hash()[:32]}.json" if folder else None
    cached = _read(path.read_text()) if path is not None and path.is_file() else None
    if cached is not None:
        return cached
    from hetplan.graph.zoo import ZOO

    rows = [summarize(name) for name in ZOO]
    if path is not None:
        _write(path, json.dumps([dataclasses.asdict(r) for r in rows]))
    return rows


def _read(text: str) -> list[ModelSummary] | None:
    """The cached summaries, or None when the file is not a valid list (a miss)."""
    try:
        rows: list[dict[str, Any]] = json.loads(text)
        return [ModelSummary(**(r | {"input_shape": tuple(r["input_shape"])})) for r in rows]
    except (ValueError, TypeError, KeyError):
        return None


def _write(path: Path, text: str) -> None:
    """Best effort, like the graph cache: a disk that refuses is not an error."""
    from hetplan.errors import InputError
    from hetplan.serde import write_text_atomic

    with contextlib.suppress(InputError):
        write_text_atomic(path, text)
