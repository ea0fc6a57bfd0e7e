"""The plan specification: what a plan may say, as data every layer of hetplan reads.

A leaf: it imports nothing else of hetplan (and no torch or numpy), so that the planner
(:mod:`hetplan.plan`), the prediction (:mod:`hetplan.predict`), the cost models and the
runtime can all read plans without importing each other. It holds the plan dataclasses
(:mod:`.plan`), the strategy names and their groupings (:mod:`.strategies`), the training
dtypes (:mod:`.dtypes`; torch's in :mod:`.torch_dtypes`, not imported here) and how a batch
is shared (:mod:`.batch`).
"""

from hetplan.planspec.batch import micro_batch_size, split_batch
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
    "micro_batch_size",
    "split_batch",
]
