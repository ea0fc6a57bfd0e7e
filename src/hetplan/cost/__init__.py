"""Cost models: pure functions of numbers returning seconds, bytes and watts."""

from hetplan.cost.compute import AnalyticalCompute, gpipe_compute_time, roofline_time
from hetplan.cost.memory import (
    MemoryBreakdown,
    stage_memory,
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
    "roofline_time",
    "stage_memory",
    "utilization_power",
]
