"""Search options shared by the screening and the search."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from hetplan.errors import InputError
from hetplan.plan.objective import Limits, Objective
from hetplan.planspec.plan import MAX_BATCH
from hetplan.planspec.strategies import RUNNABLE, STRATEGIES

FAMILIES: tuple[str, ...] = STRATEGIES
"""Families the search screens: every strategy. :data:`RUNNABLE` (re-exported from
:mod:`hetplan.planspec.strategies`): those ``hetplan train`` executes."""

__all__ = ["FAMILIES", "RUNNABLE", "Budget", "Progress", "SearchOptions", "check_batch"]


def check_batch(batch: int, option: str = "--batch") -> None:
    """InputError naming ``option`` unless ``batch`` is a global batch a plan can have."""
    if not 1 <= batch <= MAX_BATCH:
        raise InputError(f"{option} must be between 1 and {MAX_BATCH:,} samples (got {batch})")


class Progress(Protocol):
    """Progress callback: ``done`` of ``total`` steps of ``phase`` (total 0: unknown), and
    the best figure so far (e.g. ``"1.23 s"``) once there is one."""

    def __call__(self, phase: str, done: int, total: int, /, *, best: str = "") -> None: ...


@dataclass
class Budget:
    """A search's wall-clock limit (``None``: none) and the phases it cut short."""

    limit_s: float | None = None
    start: float = field(default_factory=time.perf_counter)
    cut: list[str] = field(default_factory=list)
    simulated: int = 0
    """Candidates predicted with the simulator so far."""

    def over(self) -> bool:
        return self.limit_s is not None and time.perf_counter() - self.start > self.limit_s

    def stop(self, phase: str) -> bool:
        """True when the limit is reached; records ``phase`` as cut short (once)."""
        if not self.over():
            return False
        if phase not in self.cut:
            self.cut.append(phase)
        return True


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
    time_limit_s: float | None = None
    """Stop screening and simulating once this many seconds have passed and return the best
    plan simulated so far (at least one candidate is always simulated)."""
