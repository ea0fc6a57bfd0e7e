"""Which compute model a command uses: measured profiles where the store has them."""

from __future__ import annotations

from pathlib import Path

from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.learned_compute import LearnedCompute
from hetplan.cost.types import ComputeModel
from hetplan.profile.calib_store import load_calibrations
from hetplan.profile.learn import StoreFits
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profiles


def compute_model(
    dtype: str = "fp32", *, directory: Path | None = None, measured: bool = True
) -> ComputeModel:
    """``MeasuredCompute`` over the stored profiles, or the analytical model when the store is
    empty or ``measured`` is False. Models and device types without a profile of their own are
    priced by what the store's profiles of other models teach their types
    (:class:`~hetplan.cost.learned_compute.LearnedCompute`), else analytically. The analytical
    model uses the store's calibrations (``hetplan calibrate``) for the device types they
    cover, in ``dtype``."""
    analytical = AnalyticalCompute(dtype=dtype, calibrations=load_calibrations(directory))
    if measured:
        profiles = load_profiles(directory)
        if profiles:
            learned = LearnedCompute(analytical, StoreFits(profiles, analytical, directory))
            return MeasuredCompute(profiles, fallback=learned, hooks=learned)
    return analytical
