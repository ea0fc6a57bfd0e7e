"""``calibrate`` and ``profile`` on ``cuda:0`` (marked ``gpu``; skipped without CUDA): they run,
say nothing torch-internal, file under the GPU's catalog type, and time what they name."""

from __future__ import annotations

import warnings

import pytest
import torch

from hetplan.profile.calibrate import Settings, calibrate
from hetplan.profile.model import ProfileRequest, device_type_for, profile_model

pytestmark = pytest.mark.gpu

QUICK = Settings(min_time_s=0.01, min_repeats=3, max_repeats=20, warmup=1)


def test_calibrate_on_cuda_runs_quietly() -> None:
    dev = torch.device("cuda:0")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cal = calibrate(device_type_for(None, dev), dev, "bf16", ("matmul",), QUICK)
    assert not [w for w in seen if "cuBLAS" in str(w.message)], [str(w.message) for w in seen]
    assert cal.device.startswith("cuda") and cal.curves
    for curve in cal.curves:
        assert all(p.seconds > 0 for p in curve.points)


def test_profile_on_cuda_layers_fit_inside_the_step() -> None:
    prof = profile_model(
        ProfileRequest(model="resnet18", dataset="cifar10", batch_sizes=(64,), device="cuda:0",
                       dtype="bf16", warmup=2, steps=4)
    )  # fmt: skip
    (b,) = prof.batches
    layers = sum(t.fwd.median_s + t.bwd.median_s for t in b.layers)
    assert 0 < layers < b.step.median_s
    assert all(t.fwd_peak_bytes is not None for t in b.layers)  # the allocator's view, on CUDA
