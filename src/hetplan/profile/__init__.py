"""Measured per-layer costs and link figures: profiling, the profile store, MeasuredCompute.

Re-exported here: the profile types, the store and the measured compute model. The profiler
lives in :mod:`hetplan.profile.model` / :mod:`hetplan.profile.layers`, the link benchmark in
:mod:`hetplan.profile.links` / :mod:`hetplan.profile.link_config`.
"""

from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import (
    find_profile,
    load_profile,
    load_profiles,
    profile_dir,
    save_profile,
)
from hetplan.profile.types import (
    BatchTiming,
    LayerFit,
    LayerTiming,
    Profile,
    Provenance,
    StepFit,
)

__all__ = [
    "BatchTiming",
    "LayerFit",
    "LayerTiming",
    "MeasuredCompute",
    "Profile",
    "Provenance",
    "StepFit",
    "find_profile",
    "load_profile",
    "load_profiles",
    "profile_dir",
    "save_profile",
]
