"""Search options shared by the screening and the search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hetplan.plan.objective import Limits, Objective

FAMILIES = ("dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid")

Progress = Callable[[str, int, int], None]
"""``(phase, done, total)`` callback for a progress bar."""


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What to search for: batch, objective, limits, optimizer, families, epoch size."""

    batch: int
    objective: Objective
    limits: Limits = field(default_factory=Limits)
    optimizer: str = "sgd"
    families: tuple[str, ...] = FAMILIES
    dataset_size: int | None = None
