"""Cost models: pure functions of numbers returning seconds, bytes and watts."""

from hetplan.cost.compute import AnalyticalCompute, gpipe_compute_time, roofline_time
from hetplan.cost.memory import (
    MemoryBreakdown,
    in_flight_microbatches,
    stage_memory,
    stashed_weight_versions,
)
from hetplan.cost.power import (
    LinearPowerModel,
    dollars,
    edp,
    energy_j,
    utilization_power,
)
from hetplan.cost.types import ComputeModel, LayerCost

__all__ = [
    "AnalyticalCompute",
    "ComputeModel",
    "LayerCost",
    "LinearPowerModel",
    "MemoryBreakdown",
    "dollars",
    "edp",
    "energy_j",
    "gpipe_compute_time",
    "in_flight_microbatches",
    "roofline_time",
    "stage_memory",
    "stashed_weight_versions",
    "utilization_power",
]
