"""Search options shared by the screening and the search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hetplan.plan.objective import Limits, Objective

FAMILIES = ("dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid")
RUNNABLE = ("dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid")
"""Families ``hetplan train`` executes; dp, gpipe, 1f1b and hybrid also with tensor
parallelism inside their stages (``search.unrunnable``)."""

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
    runnable_only: bool = True
    """Search only plans ``hetplan train`` can run (:data:`RUNNABLE`; tensor parallelism only
    with dp, gpipe, 1f1b and hybrid); False prices every family as a what-if."""
    dataset_size: int | None = None
