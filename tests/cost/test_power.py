"""Utilisation power, the linear counter model, energy, EDP and money."""

from __future__ import annotations

import numpy as np
import pytest

from hetplan.cluster.spec import DeviceType
from hetplan.cost.power import LinearPowerModel, dollars, edp, energy_j, utilization_power


def test_utilization_power(gpu: DeviceType) -> None:
    assert utilization_power(gpu, 0.5) == pytest.approx(150.0)
    assert utilization_power(gpu, 0.0) == pytest.approx(50.0)
    assert utilization_power(gpu, 2.0) == pytest.approx(250.0)


def test_linear_model_recovers_coefficients() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(50, 3)) * np.array([100.0, 1500.0, 100.0])  # util, MHz, mem
    true = np.array([1.2, 0.05, 0.4])
    y = 35.0 + x @ true
    model = LinearPowerModel(["util", "sm_mhz", "mem_util"]).fit(x, y)
    assert model.intercept == pytest.approx(35.0, abs=1e-8)
    np.testing.assert_allclose(model.coef, true, atol=1e-10)
    assert model.predict([50.0, 1000.0, 10.0]) == pytest.approx(35 + 60 + 50 + 4)
    noisy = LinearPowerModel().fit(x, y + rng.normal(0, 0.5, size=50))
    np.testing.assert_allclose(noisy.coef, true, rtol=0.1)
    np.testing.assert_allclose(noisy.predict_many(x[:3]), y[:3], atol=2.0)


def test_linear_model_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="counters"):
        LinearPowerModel(["a", "b"]).fit([[1.0], [2.0]], [1.0, 2.0])


def test_energy_edp_dollars() -> None:
    assert energy_j(200.0, 10.0) == 2000.0
    assert edp(2000.0, 10.0) == 20000.0
    assert dollars(3.6, 1000.0) == pytest.approx(1.0)
