"""Which compute model a command uses: measured profiles where the store has them."""

from __future__ import annotations

from pathlib import Path

from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.types import ComputeModel
from hetplan.profile.calib_store import load_calibrations
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profiles


def compute_model(
    dtype: str = "fp32", *, directory: Path | None = None, measured: bool = True
) -> ComputeModel:
    """``MeasuredCompute`` over the stored profiles (it falls back to the analytical model for
    unmeasured device types and models), or the analytical model when the store is empty or
    ``measured`` is False. The analytical model uses the store's calibrations (``hetplan
    calibrate``) for the device types they cover, in ``dtype``."""
    analytical = AnalyticalCompute(dtype=dtype, calibrations=load_calibrations(directory))
    if measured:
        profiles = load_profiles(directory)
        if profiles:
            return MeasuredCompute(profiles, fallback=analytical)
    return analytical
