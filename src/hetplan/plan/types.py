"""The plan as data: re-exported from :mod:`hetplan.planspec`, where it lives so that
:mod:`hetplan.predict` and the cost models read plans without importing the planner."""

from hetplan.planspec.plan import (
    MAX_BATCH,
    ModelRef,
    Optimizer,
    PipelinePlan,
    Plan,
    PsAssignment,
    StagePlan,
    Sync,
)
from hetplan.planspec.strategies import PIPELINED, STRATEGIES, Strategy

__all__ = [
    "MAX_BATCH",
    "PIPELINED",
    "STRATEGIES",
    "ModelRef",
    "Optimizer",
    "PipelinePlan",
    "Plan",
    "PsAssignment",
    "StagePlan",
    "Strategy",
    "Sync",
]
