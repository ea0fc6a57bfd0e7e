"""The learned correction: the host/device bound by hand, and the fit against a known law."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from hetplan.cost.learned import MIN_SLOPE, OVERLAP_P, ClassFit, LayerSample, fit_classes, overlap
from hetplan.graph.types import OP_CLASSES

MATMUL, MEMORY = OP_CLASSES.index("matmul"), OP_CLASSES.index("memory")


def law(**over: object) -> ClassFit:
    """Forward: matmul x2, memory x1.5; backward: all x1; host 10 us per kernel forward,
    20 us backward; the profiler's hooks 50 us a window forward, 100 us backward."""
    fwd = [1.0] * len(OP_CLASSES)
    fwd[MATMUL], fwd[MEMORY] = 2.0, 1.5
    fields: dict[str, object] = {
        "device_type": "H100-SXM",
        "dtype": "bf16",
        "scales": (tuple(fwd), tuple([1.0] * len(OP_CLASSES))),
        "hook_s": (50e-6, 100e-6),
        "kernel_s": (10e-6, 20e-6),
        "models": ("a", "b"),
        "samples": 0,
        "median_error": 0.0,
    }
    fields.update(over)
    return ClassFit(**fields)  # type: ignore[arg-type]


def classes(matmul: float = 0.0, memory: float = 0.0) -> list[float]:
    out = [0.0] * len(OP_CLASSES)
    out[MATMUL], out[MEMORY] = matmul, memory
    return out


def test_a_compute_bound_layer_takes_its_scaled_device_time() -> None:
    # 1 ms of matmul and 0.2 ms of memory forward, 4 kernels: device 2*1 + 1.5*0.2 = 2.3 ms;
    # host 4*10 = 40 us: (2.3^6 + 0.04^6)^(1/6) = 2.3 ms to 1e-10.
    fit = law()
    assert fit.seconds(classes(1e-3, 2e-4), 4, False) == pytest.approx(2.3e-3)
    assert not fit.host_bound(classes(1e-3, 2e-4), 4, False)


def test_a_launch_bound_layer_takes_its_host_time() -> None:
    # 10 us of matmul backward in 30 kernels: device 10 us; host 30*20 = 600 us.
    fit = law()
    assert fit.seconds(classes(1e-5), 30, True) == pytest.approx(600e-6)
    assert fit.host_bound(classes(1e-5), 30, True)


def test_a_profiled_window_adds_the_hooks_to_what_a_step_pays() -> None:
    # The layers above as ``hetplan profile`` times them: + 50 us forward, + 100 us backward.
    fit = law()
    assert fit.seconds(classes(1e-3, 2e-4), 4, False, hooked=True) == pytest.approx(2.35e-3)
    assert fit.seconds(classes(1e-5), 30, True, hooked=True) == pytest.approx(700e-6)


def synthetic(truth: ClassFit, model: str, seed: int, *, hooked: bool = True) -> list[LayerSample]:
    """Samples of ``model`` whose measured time is exactly ``truth`` over varied layers, as
    profiled (``hooked``) or as a write-back measured them."""
    out = []
    for i in range(40):
        mm = 1e-6 * (1 + (7 * i + seed) % 23) ** 2  # 1 us .. 0.5 ms
        mem = 1e-6 * (1 + (5 * i + 3 * seed) % 17) ** 2
        kernels = 2 + (3 * i + seed) % 19
        for backward in (False, True):
            c = classes(mm, mem)
            out.append(
                LayerSample(
                    model=model,
                    backward=backward,
                    class_s=tuple(c),
                    kernels=kernels,
                    measured_s=truth.seconds(c, kernels, backward, hooked=hooked),
                    hooked=hooked,
                )
            )
    return out


def test_the_fit_recovers_a_known_law_from_exact_samples() -> None:
    truth = law()
    fit = fit_classes(synthetic(truth, "a", 1) + synthetic(truth, "b", 2), "H100-SXM", "bf16")
    assert fit.models == ("a", "b")
    assert fit.samples == 160
    assert fit.median_error < 0.01
    # Held-out layers (another seed) priced within 3% (the weak prior biases the scales a little).
    for s in synthetic(truth, "c", 5):
        assert fit.seconds(s.class_s, s.kernels, s.backward, hooked=True) == pytest.approx(
            s.measured_s, rel=0.03
        )
    assert math.isclose(fit.scales[0][MATMUL], 2.0, rel_tol=0.03)
    assert fit.hook_s == pytest.approx((50e-6, 100e-6), rel=0.05)


def test_windows_without_hooks_teach_no_hook_cost() -> None:
    # Written-back layers (no hooks) beside profiled ones: the step's law is still recovered,
    # and held-out write-backs are priced without the hooks.
    truth = law()
    samples = synthetic(truth, "a", 1) + synthetic(truth, "b", 2, hooked=False)
    fit = fit_classes(samples, "H100-SXM", "bf16")
    assert fit.hook_s == pytest.approx((50e-6, 100e-6), rel=0.05)
    for s in synthetic(truth, "c", 5, hooked=False):
        assert fit.seconds(s.class_s, s.kernels, s.backward) == pytest.approx(
            s.measured_s, rel=0.03
        )


def test_one_model_is_not_enough_to_learn_from() -> None:
    with pytest.raises(ValueError, match="2 models"):
        fit_classes(synthetic(law(), "a", 1), "H100-SXM", "bf16")


def sloped() -> ClassFit:
    """``law`` with forward matmul growing more slowly than its calibration: slope -0.2."""
    slopes = [0.0] * len(OP_CLASSES)
    slopes[MATMUL] = -0.2
    return law(slopes=(tuple(slopes), tuple([0.0] * len(OP_CLASSES))))


def test_a_slope_scales_a_class_by_its_size_against_the_reference() -> None:
    # 0.1 ms of matmul forward: 2 x 0.1 ms x (0.1 ms / 1 ms) ** -0.2 = 0.3170 ms (10 ** 0.2 =
    # 1.5849); at 1 ms the slope changes nothing; host 50 + 10 us, far below.
    fit = sloped()
    assert fit.seconds(classes(1e-4), 1, False) == pytest.approx(2e-4 * 10**0.2, rel=1e-3)
    assert fit.seconds(classes(1e-3), 1, False) == pytest.approx(2e-3, rel=1e-6)


def test_the_fit_recovers_a_slope() -> None:
    truth = sloped()
    fit = fit_classes(synthetic(truth, "a", 1) + synthetic(truth, "b", 2), "H100-SXM", "bf16")
    assert fit.slopes[0][MATMUL] == pytest.approx(-0.2, abs=0.03)
    for s in synthetic(truth, "c", 5):
        assert fit.seconds(s.class_s, s.kernels, s.backward, hooked=True) == pytest.approx(
            s.measured_s, rel=0.03
        )


def test_memory_has_no_slope_to_stretch_past_the_layers_it_was_fitted_on() -> None:
    # Samples whose memory class grows faster than its calibration (slope 0.3) and whose
    # forward matmul grows more slowly (-0.2): the fit keeps memory's slope at 0 and still
    # finds matmul's.
    slopes = [0.0] * len(OP_CLASSES)
    slopes[MEMORY], slopes[MATMUL] = 0.3, -0.2
    truth = law(slopes=(tuple(slopes), tuple([0.0] * len(OP_CLASSES))))
    fit = fit_classes(synthetic(truth, "a", 1) + synthetic(truth, "b", 2), "H100-SXM", "bf16")
    assert fit.slopes[0][MEMORY] == fit.slopes[1][MEMORY] == 0.0
    assert fit.slopes[0][MATMUL] == pytest.approx(-0.2, abs=0.05)


def flat(model: str, seed: int) -> list[LayerSample]:
    """Samples whose forward matmul takes 200 us whatever its calibrated time (1 us .. 0.5 ms),
    with no kernel to issue and no hooks: only the device term can explain them."""
    out = []
    for i in range(40):
        mm = 1e-6 * (1 + (7 * i + seed) % 23) ** 2
        c = tuple(classes(mm))
        out.append(
            LayerSample(
                model=model, backward=False, class_s=c, kernels=0, measured_s=2e-4, hooked=False
            )
        )
    return out


def test_no_slope_makes_more_work_take_less_time() -> None:
    # Flat times would be fitted best by a slope of -1 (time independent of work); the fit
    # stops at MIN_SLOPE, and the priced time never falls as the class time grows.
    fit = fit_classes(flat("a", 1) + flat("b", 2), "H100-SXM", "bf16")
    assert fit.slopes[0][MATMUL] == pytest.approx(MIN_SLOPE, abs=1e-6)
    sweep = [fit.seconds(classes(1e-7 * 2**k), 1, False) for k in range(20)]
    assert all(b >= a for a, b in itertools.pairwise(sweep))


def test_a_slope_is_held_at_the_edges_of_the_sizes_fitted() -> None:
    # ``sloped`` (forward matmul x2, slope -0.2) fitted on 0.1 .. 0.4 ms: at 0.4 ms the factor
    # is 2 x 0.4 ** -0.2; at 4 ms and 40 ms it stays that factor (linear in the class time),
    # where the unbounded law would give 2 x 4 ** -0.2 and 2 x 40 ** -0.2; below 0.1 ms the
    # factor of 0.1 ms holds. Hosts (50 + 10 us) are far below the device times here.
    span = (1e-4, 4e-4)
    spans = tuple((span if c == MATMUL else (0.0, 0.0)) for c in range(len(OP_CLASSES)))
    fit = dataclasses.replace(sloped(), spans=(spans, spans))
    edge = 2 * 0.4**-0.2
    assert fit.seconds(classes(4e-4), 1, False) == pytest.approx(4e-4 * edge, rel=1e-3)
    assert fit.seconds(classes(4e-3), 1, False) == pytest.approx(4e-3 * edge, rel=1e-3)
    assert fit.seconds(classes(4e-2), 1, False) == pytest.approx(4e-2 * edge, rel=1e-3)
    assert fit.seconds(classes(5e-5), 1, False) == pytest.approx(5e-5 * 2 * 0.1**-0.2, rel=0.05)


def test_a_fit_records_the_sizes_it_saw() -> None:
    samples = synthetic(sloped(), "a", 1) + synthetic(sloped(), "b", 2)
    fit = fit_classes(samples, "H100-SXM", "bf16")
    seen = [s.class_s[MATMUL] for s in samples if not s.backward]
    assert fit.spans[0][MATMUL] == (min(seen), max(seen))
    # No sample ran attention: no bounds for it.
    assert fit.spans[0][OP_CLASSES.index("attention")] == (0.0, 0.0)


def test_the_host_device_bound_survives_a_fits_extreme_trials() -> None:
    """The p-norm taken after scaling by the larger term: 1e60 s (a fit's trial of extreme
    slopes) would overflow its sixth power; equal terms give 2^(1/p) of either."""
    with np.errstate(over="raise"):
        got = overlap(np.array([1e60, 1e-3, 0.0]), np.array([1.0, 1e-3, 0.0]))
    assert got[0] == pytest.approx(1e60)
    assert got[1] == pytest.approx(1e-3 * 2 ** (1 / OVERLAP_P))
    assert got[2] == 0.0
