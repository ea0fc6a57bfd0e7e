"""Schedules as data: per-device ordered actions for every strategy, printable as a grid."""

from hetplan.schedule.builder import ScheduleBuilder
from hetplan.schedule.generators import (
    data_parallel,
    gpipe,
    one_f_one_b,
    parameter_server,
    pipedream_async,
    synchronous,
    wsp,
)
from hetplan.schedule.grid import compute_only, format_grid
from hetplan.schedule.types import Action, ActionKind, RateMark, Schedule
from hetplan.schedule.work import CutWork, PipelineWork, PsWork, StageWork, SyncBucket

__all__ = [
    "Action",
    "ActionKind",
    "CutWork",
    "PipelineWork",
    "PsWork",
    "RateMark",
    "Schedule",
    "ScheduleBuilder",
    "StageWork",
    "SyncBucket",
    "compute_only",
    "data_parallel",
    "format_grid",
    "gpipe",
    "one_f_one_b",
    "parameter_server",
    "pipedream_async",
    "synchronous",
    "wsp",
]
