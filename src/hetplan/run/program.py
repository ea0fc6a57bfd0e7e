"""Transitional: the worker's import of :func:`is_windowed` (the spec answers it)."""

from __future__ import annotations

from hetplan.planspec import Plan
from hetplan.planspec.strategies import spec_of


def is_windowed(plan: Plan) -> bool:
    return spec_of(plan).windowed(plan)
