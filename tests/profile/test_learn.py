"""Learning a GPU type from other models' profiles in the store (issue 30, item 3), and
pricing an unmeasured GPU type from a learned one by its specs (item 4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from hetplan.cluster import Device, device_type
from hetplan.cost.compute import BWD_WEIGHT_PASSES, FWD_WEIGHT_PASSES, AnalyticalCompute
from hetplan.cost.learned import ClassFit
from hetplan.cost.op_classes import class_times
from hetplan.cost.types import LayerCost
from hetplan.graph import build_graph
from hetplan.graph.types import OP_CLASSES, ModelGraph
from hetplan.planspec import ModelRef
from hetplan.profile.fit import Stats
from hetplan.profile.learn import StoreFits, fit_path
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profiles, save_profile
from hetplan.profile.types import BatchTiming, Profile

ProfileFactory = Callable[..., Profile]

GPU = "H100-SXM"
BATCHES = (2, 8, 32)
TEACHERS = (("gpt-tiny", None), ("resnet-tiny", "cifar10"))
"""Between them every class bert-tiny uses (matmul, attention, memory) appears."""


def truth() -> ClassFit:
    """The law the synthetic profiles follow: forward matmul 1.8x its catalog time, attention
    1.3x, memory 2.5x; backward 1.2x, 1.0x, 2.0x; conv 1.4x both; host 8 us a kernel forward,
    12 us backward; the profiler's hooks 30 us a window forward, 60 us backward."""
    fwd = dict(zip(OP_CLASSES, [1.0] * len(OP_CLASSES), strict=True))
    bwd = dict(fwd)
    fwd.update(matmul=1.8, attention=1.3, memory=2.5, conv=1.4)
    bwd.update(matmul=1.2, attention=1.0, memory=2.0, conv=1.4)
    return ClassFit(
        device_type=GPU, dtype="fp32",
        scales=(tuple(fwd[c] for c in OP_CLASSES), tuple(bwd[c] for c in OP_CLASSES)),
        hook_s=(30e-6, 60e-6), kernel_s=(8e-6, 12e-6),
        models=(), samples=0, median_error=0.0,
    )  # fmt: skip


def gpu() -> Device:
    return Device(id="g.0", type=device_type(GPU), node="g", index=0)


def lawful_times(
    graph: ModelGraph, batch: int, *, hooked: bool = False
) -> list[tuple[float, float]]:
    """Every layer's forward and backward seconds under :func:`truth` (catalog class times), in
    a training step or (``hooked``) as profiled."""
    rates = AnalyticalCompute("fp32").class_rates(gpu())
    law, out = truth(), []
    for layer in graph.layers:
        pair = []
        for backward, passes, kernels in (
            (False, FWD_WEIGHT_PASSES, layer.fwd_kernels),
            (True, BWD_WEIGHT_PASSES, layer.bwd_kernels),
        ):
            times = class_times(layer, backward, batch, passes, rates)
            classes = [times.get(c, 0.0) for c in OP_CLASSES]
            pair.append(law.seconds(classes, kernels, backward, hooked=hooked))
        out.append((pair[0], pair[1]))
    return out


def lawful_profile(
    make_profile: ProfileFactory, name: str, dataset: str | None, dtype: str = "fp32"
) -> Profile:
    graph = build_graph(ModelRef(name=name, dataset=dataset, dtype=dtype))
    base = make_profile(
        device_type=GPU, model=name, input_shape=graph.input_shape, batch_sizes=BATCHES,
        dtype=dtype,
        fits={layer.name: (1e-4, 1e-5, 1e-4, 1e-5) for layer in graph.layers},
    )  # fmt: skip

    def timing(batch: BatchTiming) -> BatchTiming:
        layers = tuple(
            dataclasses.replace(t, fwd=Stats(median_s=f, p10_s=f, p90_s=f),
                                bwd=Stats(median_s=b, p10_s=b, p90_s=b))
            for t, (f, b) in zip(
                batch.layers, lawful_times(graph, batch.batch, hooked=True), strict=True
            )
        )  # fmt: skip
        return dataclasses.replace(batch, layers=layers)

    batches = tuple(map(timing, base.batches))
    return dataclasses.replace(base, dataset=dataset, batches=batches, device="cuda:0")


@pytest.fixture
def store(tmp_path: Path, make_profile: ProfileFactory) -> Path:
    for name, dataset in TEACHERS:
        save_profile(lawful_profile(make_profile, name, dataset), tmp_path)
    return tmp_path


def test_a_model_nobody_profiled_is_priced_by_what_the_others_taught(store: Path) -> None:
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp32"))
    costs = compute_model("fp32", directory=store).layer_costs(graph, gpu(), 16)
    assert {c.source for c in costs} == {f"learned on {GPU} from 2 models"}
    # The law of a training step (no hooks), at a size no profile holds: within 8%, as the
    # weak priors (scales toward 1, slopes toward 0) pull a fit whose small models' windows
    # barely tell the hooks' fixed cost from their kernels' (hooks fitted at 26 and 59 us).
    expected = lawful_times(graph, 16)
    for cost, (fwd, bwd) in zip(costs, expected, strict=True):
        assert cost.fwd_s == pytest.approx(fwd, rel=0.08)
        assert cost.bwd_s == pytest.approx(bwd, rel=0.08)
    # Without learning (catalog classes only), the same layers are far off the law.
    plain = AnalyticalCompute("fp32").layer_costs(graph, gpu(), 16)
    assert sum(c.fwd_s for c in plain) < 0.8 * sum(f for f, _ in expected)


def test_the_fit_uses_the_other_models_and_a_models_own_profile_wins(
    store: Path, make_profile: ProfileFactory
) -> None:
    analytical = AnalyticalCompute("fp32")
    fit = StoreFits(load_profiles(store), analytical, store).fit(GPU)
    assert fit is not None and fit.models == ("gpt-tiny", "resnet-tiny")
    assert fit_path(GPU, "fp32", store).is_file()  # cached for the next command
    assert fit.spans and StoreFits(load_profiles(store), analytical, store).fit(GPU) == fit
    assert fit.hook_s == pytest.approx(truth().hook_s, rel=0.2)
    save_profile(lawful_profile(make_profile, "bert-tiny", None), store)
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp32"))
    costs = compute_model("fp32", directory=store).layer_costs(graph, gpu(), 16)
    assert {c.source for c in costs} == {f"measured on {GPU}, less its hooks"}
    # Its windows (the profile's fits: 0.1 ms + 10 us a sample, both passes) less the hooks
    # the three models taught.
    refit = StoreFits(load_profiles(store), analytical, store).fit(GPU)
    assert refit is not None and refit.models == ("bert-tiny", "gpt-tiny", "resnet-tiny")
    assert costs[0].fwd_s == pytest.approx(1e-4 + 16 * 1e-5 - refit.hook_s[0])
    assert costs[0].bwd_s == pytest.approx(1e-4 + 16 * 1e-5 - refit.hook_s[1])


def test_an_unmeasured_gpu_is_scaled_from_the_learned_one_by_specs(store: Path) -> None:
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp32"))
    a100 = Device(id="a.0", type=device_type("A100-40GB"), node="a", index=0)
    model = compute_model("fp32", directory=store)
    on_a100, on_h100 = model.layer_costs(graph, a100, 16), model.layer_costs(graph, gpu(), 16)
    assert {c.source for c in on_a100} == {f"learned on {GPU}, scaled to A100-40GB by specs"}
    _assert_catalog_ratio(graph, (a100, on_a100), (gpu(), on_h100), backward=False)


def _assert_catalog_ratio(
    graph: ModelGraph,
    priced: tuple[Device, list[LayerCost]],
    ref: tuple[Device, list[LayerCost]],
    *,
    backward: bool = True,
) -> None:
    """Layer by layer, ``priced`` over ``ref`` is the catalog's ratio of the two devices
    (forward, and backward unless ``backward`` is False)."""
    ana = AnalyticalCompute("fp32")
    mine, theirs = ana.layer_costs(graph, priced[0], 16), ana.layer_costs(graph, ref[0], 16)
    for p, r, cp, cr in zip(priced[1], ref[1], mine, theirs, strict=True):
        assert p.fwd_s / r.fwd_s == pytest.approx(cp.fwd_s / cr.fwd_s, rel=1e-9)
        if backward:
            assert p.bwd_s / r.bwd_s == pytest.approx(cp.bwd_s / cr.bwd_s, rel=1e-9)


def test_cpu_profiles_teach_nothing(tmp_path: Path, make_profile: ProfileFactory) -> None:
    for name in ("a", "b"):
        save_profile(make_profile(model=name), tmp_path)
    fits = StoreFits(load_profiles(tmp_path), AnalyticalCompute("fp32"), tmp_path)
    assert fits.fit("cpu") is None


def test_fp16_learns_from_bf16_profiles_where_the_peaks_are_equal(
    tmp_path: Path, make_profile: ProfileFactory
) -> None:
    for name, dataset in TEACHERS:
        save_profile(lawful_profile(make_profile, name, dataset, "bf16"), tmp_path)
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp16"))
    costs = compute_model("fp16", directory=tmp_path).layer_costs(graph, gpu(), 16)
    assert {c.source for c in costs} == {
        f"learned on {GPU} from 2 models (bf16 profiles: same peak)"
    }
    t4 = Device(id="t.0", type=device_type("T4"), node="t", index=0)  # fp16 8x bf16 on a T4
    on_t4 = compute_model("fp16", directory=tmp_path).layer_costs(graph, t4, 16)
    assert {c.source for c in on_t4} == {f"learned on {GPU}, scaled to T4 by specs"}


def _as_type(profile: Profile, kind: str) -> Profile:
    return dataclasses.replace(profile, device_type=kind)


def test_a_measured_model_is_scaled_by_one_basis_where_its_target_has_no_fit(
    store: Path, make_profile: ProfileFactory
) -> None:
    """bert-tiny profiled on the H100 alone, priced on a T4 (no data) beside an A100 that has
    a fit of its own: the ratio is the catalog's T4 / H100, layer by layer, not the A100's fit
    scaled to the T4 over the H100's fit (which put the two fits' difference into it)."""
    for name, dataset in TEACHERS:
        slow = _slower(lawful_profile(make_profile, name, dataset), 3.0)
        save_profile(_as_type(slow, "A100-40GB"), store)
    save_profile(lawful_profile(make_profile, "bert-tiny", None), store)
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp32"))
    t4 = Device(id="t.0", type=device_type("T4"), node="t", index=0)
    model = compute_model("fp32", directory=store)
    on_t4, on_h100 = model.layer_costs(graph, t4, 16), model.layer_costs(graph, gpu(), 16)
    assert {c.source for c in on_t4} == {f"scaled from {GPU}"}
    _assert_catalog_ratio(graph, (t4, on_t4), (gpu(), on_h100))


def _slower(profile: Profile, factor: float) -> Profile:
    """``profile`` with every layer's times ``factor`` times as long."""

    def times(stats: Stats) -> Stats:
        return Stats(median_s=stats.median_s * factor, p10_s=stats.p10_s * factor,
                     p90_s=stats.p90_s * factor)  # fmt: skip

    def batch(b: BatchTiming) -> BatchTiming:
        layers = tuple(dataclasses.replace(t, fwd=times(t.fwd), bwd=times(t.bwd)) for t in b.layers)
        return dataclasses.replace(b, layers=layers)

    return dataclasses.replace(profile, batches=tuple(map(batch, profile.batches)))


def test_an_unmeasured_gpu_is_scaled_from_the_nearest_fitted_type(
    store: Path, make_profile: ProfileFactory
) -> None:
    """Fits on an A100 (first by name) and on a T4: a P40 (12 TFLOP/s, 346 GB/s) is priced
    from the T4 (8.1, 320), whose analytical time of the model is nearer its own."""
    for name, dataset in TEACHERS:
        save_profile(_as_type(lawful_profile(make_profile, name, dataset), "T4"), store)
        save_profile(_as_type(lawful_profile(make_profile, name, dataset), "A100-40GB"), store)
    graph = build_graph(ModelRef(name="bert-tiny", dtype="fp32"))
    p40 = Device(id="p.0", type=device_type("P40"), node="p", index=0)
    costs = compute_model("fp32", directory=store).layer_costs(graph, p40, 16)
    assert {c.source for c in costs} == {"learned on T4, scaled to P40 by specs"}


def test_bf16_learns_from_fp16_profiles_where_the_peaks_are_equal(
    tmp_path: Path, make_profile: ProfileFactory
) -> None:
    """Public profiles are mostly fp16: they teach bf16 where the catalog gives one peak to
    both (the H100), not on a V100, whose bf16 falls back to its FP32 rate."""
    for name, dataset in TEACHERS:
        teacher = lawful_profile(make_profile, name, dataset, "fp16")
        save_profile(teacher, tmp_path)
        save_profile(_as_type(teacher, "V100-16GB"), tmp_path)
    graph = build_graph(ModelRef(name="bert-tiny", dtype="bf16"))
    model = compute_model("bf16", directory=tmp_path)
    on_h100 = model.layer_costs(graph, gpu(), 16)
    assert {c.source for c in on_h100} == {
        f"learned on {GPU} from 2 models (fp16 profiles: same peak)"
    }
    v100 = Device(id="v.0", type=device_type("V100-16GB"), node="v", index=0)
    on_v100 = model.layer_costs(graph, v100, 16)
    assert {c.source for c in on_v100} == {f"learned on {GPU}, scaled to V100-16GB by specs"}
