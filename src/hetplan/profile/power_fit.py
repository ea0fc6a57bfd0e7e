"""A device type's measured power model: the least-squares fit of idle and maximum watts, its
file in the profile store, and its use in place of the catalog's figures.

Below the planner and free of torch, so that ``plan`` and ``predict`` read fits without loading
the runtime; the measuring is :mod:`hetplan.run.meters.power_profile`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hetplan.cluster.spec import DeviceType
from hetplan.cost.power import LinearPowerModel
from hetplan.errors import InputError
from hetplan.profile.store import _safe, profile_dir
from hetplan.serde import load_file, to_data, write_json_atomic

LIMIT_MARGIN = 0.05
"""A metered mean power may exceed the enforced limit by this fraction (the limit is held as an
average over the driver's own window; issue 24's rule), no more."""
POWER_FIT_PREFIX = "power__"
"""The file of a stored fit: ``power__<device type>.json`` in the profile directory."""


@dataclass(frozen=True, kw_only=True)
class PowerFit:
    """Least-squares fit of ``P = idle_w + (max_w - idle_w) * u`` to measured samples."""

    idle_w: float
    """Fitted power at busy fraction 0, watts."""
    max_w: float
    """Fitted power at busy fraction 1, watts."""
    samples: int
    """Number of (busy fraction, watts) samples fitted."""
    rms_error_w: float
    """Root-mean-square residual of the samples, watts."""


def fit_utilization_power(samples: Sequence[tuple[float, float]]) -> PowerFit:
    """Fit idle and maximum power to ``(busy fraction in [0, 1], average watts)`` samples."""
    u, watts = _checked(samples)
    model = LinearPowerModel(("busy_fraction",)).fit([[x] for x in u.tolist()], watts.tolist())
    residual = watts - model.predict_many([[x] for x in u.tolist()])
    idle = model.intercept
    return PowerFit(
        idle_w=idle,
        max_w=idle + float(model.coef[0]),
        samples=len(samples),
        rms_error_w=float(np.sqrt(np.mean(residual**2))),
    )


def _checked(samples: Sequence[tuple[float, float]]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Busy fractions and watts of ``samples``; InputError when they cannot fix a line."""
    if len(samples) < 2:
        raise InputError(
            f"power fit needs at least 2 (busy fraction, watts) samples; got {len(samples)}"
        )
    data = np.asarray(samples, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != 2:
        raise InputError(f"power fit samples must be (busy fraction, watts) pairs; got {samples}")
    if not np.all(np.isfinite(data)):
        raise InputError("power fit samples must be finite numbers")
    u, watts = data[:, 0], data[:, 1]
    if u.min() < 0.0 or u.max() > 1.0:
        raise InputError(f"busy fractions must lie in [0, 1]; got {u.min()} .. {u.max()}")
    if u.min() == u.max():
        raise InputError(
            f"every sample has busy fraction {u[0]}: the slope (max - idle power) is "
            "undetermined; measure at least two different loads"
        )
    return u, watts


def power_fit_path(device_type: str, directory: Path | None = None) -> Path:
    """The file of ``device_type``'s power fit in the profile directory."""
    return profile_dir(directory) / f"{POWER_FIT_PREFIX}{_safe(device_type)}.json"


def save_power_fit(device_type: str, fit: PowerFit, directory: Path | None = None) -> Path:
    """Store ``fit`` for ``device_type`` (replacing an older one); return the file."""
    path = power_fit_path(device_type, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(fit))
    return path


def load_power_fit(device_type: str, directory: Path | None = None) -> PowerFit | None:
    """The stored fit of ``device_type``, None if there is none (InputError if unreadable)."""
    path = power_fit_path(device_type, directory)
    if not path.is_file():
        return None
    return load_file(PowerFit, path)


def apply_power_fit(device_type_obj: DeviceType, fit: PowerFit) -> DeviceType:
    """A copy of the device type with the fitted idle and maximum power (and a note of the
    fit in ``source``); InputError for a fit that the model cannot use."""
    if not (math.isfinite(fit.idle_w) and math.isfinite(fit.max_w)):
        raise InputError(f"power fit for {device_type_obj.name}: non-finite idle/max power")
    if fit.idle_w < 0 or fit.max_w < fit.idle_w:
        raise InputError(
            f"power fit for {device_type_obj.name}: idle {fit.idle_w:.1f} W, max "
            f"{fit.max_w:.1f} W; need 0 <= idle <= max (measure more, and more varied, loads)"
        )
    note = f"idle/max power fitted from {fit.samples} samples (rms error {fit.rms_error_w:.1f} W)"
    source = f"{device_type_obj.source}; {note}" if device_type_obj.source else note
    return dataclasses.replace(
        device_type_obj, idle_power_w=fit.idle_w, max_power_w=fit.max_w, source=source
    )
