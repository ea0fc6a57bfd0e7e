"""Power, energy, EDP and money.

Paper 004 estimates each device's power with a linear regression over performance counters
(its Eq. 1), then per cluster configuration: total power = sum of device powers (Eq. 5),
energy = power * time (Eq. 6), EDP = time * energy (Eq. 7). Without counters we use the
common utilisation model: idle power plus the dynamic range scaled by the busy fraction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from hetplan.cluster.spec import DeviceType

SECONDS_PER_HOUR = 3600.0  # s/h


def utilization_power(device_type: DeviceType, busy_fraction: float) -> float:
    """Average watts: ``P = P_idle + (P_max - P_idle) * u``, ``u`` clamped to [0, 1].

    The linear utilisation model (Fan, Weber & Barroso 2007, "Power provisioning for a
    warehouse-sized computer"); paper 004's regression has GPU utilisation as one of its
    terms (Eq. 1, ``x6 * U_gpu``) and sums device powers per configuration (Eq. 5).
    """
    u = min(max(busy_fraction, 0.0), 1.0)
    return device_type.idle_power_w + (device_type.max_power_w - device_type.idle_power_w) * u


class LinearPowerModel:
    """``P = y + sum_k x_k * counter_k``, fitted by least squares (paper 004, Eq. 1).

    Counters are whatever the caller measures (utilisation, clocks, memory use ...), in a
    fixed column order given by ``features``.
    """

    def __init__(self, features: Sequence[str] = ()) -> None:
        self.features = tuple(features)
        self.intercept = 0.0
        self.coef: npt.NDArray[np.float64] = np.zeros(len(self.features))

    def fit(self, x: Sequence[Sequence[float]], y: Sequence[float]) -> LinearPowerModel:
        """Least-squares fit of intercept and coefficients; returns ``self``."""
        xa = np.asarray(x, dtype=np.float64)
        ya = np.asarray(y, dtype=np.float64)
        if xa.ndim != 2 or xa.shape[0] != ya.shape[0]:
            raise ValueError(
                f"x must be (samples, counters) matching y; got {xa.shape} and {ya.shape}"
            )
        if self.features and xa.shape[1] != len(self.features):
            raise ValueError(f"x has {xa.shape[1]} counters, expected {len(self.features)}")
        design = np.hstack([np.ones((xa.shape[0], 1)), xa])
        sol, *_ = np.linalg.lstsq(design, ya, rcond=None)
        self.intercept = float(sol[0])
        self.coef = np.asarray(sol[1:], dtype=np.float64)
        return self

    def predict(self, x: Sequence[float]) -> float:
        """Watts for one sample of counters."""
        return float(self.intercept + np.dot(self.coef, np.asarray(x, dtype=np.float64)))

    def predict_many(self, x: Sequence[Sequence[float]]) -> npt.NDArray[np.float64]:
        """Watts for each row of counters."""
        out: npt.NDArray[np.float64] = self.intercept + np.asarray(x, dtype=np.float64) @ self.coef
        return out


def energy_j(power_w: float, seconds: float) -> float:
    """Joules: ``E = P * T`` (paper 004, Eq. 6)."""
    return power_w * seconds


def edp(energy_j: float, seconds: float) -> float:
    """Energy-delay product in J*s: ``EDP = T * E`` (paper 004, Eq. 7)."""
    return energy_j * seconds


def dollars(price_per_hour: float, seconds: float) -> float:
    """Rental cost in USD of ``seconds`` at ``price_per_hour`` USD/h."""
    return price_per_hour * seconds / SECONDS_PER_HOUR
