"""Predicting a model nobody profiled on a GPU: leave one model out of ``shared/gpu-truth``.

No GPU needed. For every H100 profile in ``GPU_TRUTH/h100/profiles`` (six models, bf16 and
fp32, three batch sizes each), a fresh store gets the H100's calibrations and the profiles of
the *other five* models; the model is then priced by what the other five taught
(:class:`hetplan.cost.learned_compute.LearnedCompute`, its layers as ``hetplan profile`` times
them, hooks included: :class:`AsProfiled`) and by the calibrations alone (what main did before
issue 30). Reported: per-layer forward and backward |error| against the profile (median, p90,
max over layers >= 1% of the model's time), the whole model's layer time, and the whole step
of the three ``h100/train`` runs through ``predict`` against the measured step: from the
model's own profile less its hooks (as ``predict`` prices it) and with them (before), learned
from the other five, and from the calibrations. Last, the profiles' own noise: each layer
against the layers of equal work in the same profile and batch (:func:`twin_spread`), and per
dtype, how often a layer's measured time falls as its batch grows (:func:`batch_falls`).

    .venv/bin/python benchmarks/bench_transfer.py [GPU_TRUTH]   (default ../shared/gpu-truth)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from hetplan.cluster import Device, device_type
from hetplan.cluster.config import config_from_data
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import Cluster
from hetplan.cost.calibration import STREAM
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.learned_compute import LearnedCompute
from hetplan.cost.types import ComputeModel, LayerCost
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import predict
from hetplan.profile.calib_store import load_calibrations
from hetplan.profile.learn import StoreFits
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profile, load_profiles
from hetplan.profile.types import Profile
from hetplan.serde import from_data

SIGNIFICANT = 0.01
"""Layers below this share of the model's measured time are left out of the layer figures."""
DEFAULT_TRUTH = Path(__file__).resolve().parents[2] / "shared" / "gpu-truth"


def as_before(store: Path, dtype: str) -> AnalyticalCompute:
    """The calibrations as main priced them before issue 30: per-call points, floor and all
    (marked stream-timed, so :func:`~hetplan.cost.calibration.on_stream` leaves them)."""
    cals = [dataclasses.replace(c, timing=STREAM) for c in load_calibrations(store)]
    return AnalyticalCompute(dtype, calibrations=cals)


class AsProfiled:
    """The store's learned fit of the H100, pricing layers as ``hetplan profile`` timed them
    (its hooks' cost included: :mod:`hetplan.cost.learned`), to compare with profiles."""

    def __init__(self, store: Path, dtype: str) -> None:
        analytical = AnalyticalCompute(dtype, calibrations=load_calibrations(store))
        self.learned = LearnedCompute(
            analytical, StoreFits(load_profiles(store), analytical, store)
        )

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        fit = self.learned.fits.fit(device.type.name)
        assert fit is not None, "the other five models' profiles make a fit"
        return self.learned.learned(graph, device, batch, fit, hooked=True)


def leave_out_store(truth: Path, model: str) -> Path:
    """A store with the calibrations and every profile except ``model``'s."""
    store = Path(tempfile.mkdtemp(prefix="hetplan-loo-"))
    shutil.copytree(truth / "h100" / "calibrations", store / "calibrations")
    for path in (truth / "h100" / "profiles").glob("*.json"):
        if load_profile(path).model != model:
            shutil.copy(path, store / path.name)
    return store


def layer_errors(
    prof: Profile, compute: AsProfiled | ComputeModel
) -> tuple[list[float], list[str]]:
    """|error| of every significant layer pass, and the whole model per batch size."""
    graph = build_graph(ModelRef(name=prof.model, dataset=prof.dataset, dtype=prof.dtype))
    dev = Device(id="g.0", type=device_type(prof.device_type), node="g", index=0)
    errors, whole = [], []
    for batch in prof.batches:
        costs = compute.layer_costs(graph, dev, batch.batch)
        pred = np.array([[c.fwd_s, c.bwd_s] for c in costs])
        meas = np.array([[t.fwd.median_s, t.bwd.median_s] for t in batch.layers])
        big = meas >= SIGNIFICANT * meas.sum()
        errors += list(np.abs(pred[big] / meas[big] - 1.0))
        whole.append(f"b{batch.batch} {pred.sum() / meas.sum() - 1:+.0%}")
    return errors, whole


def twin_spread(prof: Profile) -> list[float]:
    """The profile's own noise: each significant pass of a layer against the median of the
    layers with the same work in the same batch (a transformer's blocks, ResNet's repeated
    blocks), |time / median - 1|. No model that prices equal work equally can beat it."""
    graph = build_graph(ModelRef(name=prof.model, dataset=prof.dataset, dtype=prof.dtype))
    keys = [(x.work, x.param_bytes, x.fwd_kernels, x.bwd_kernels) for x in graph.layers]
    out: list[float] = []
    for batch in prof.batches:
        meas = np.array([[t.fwd.median_s, t.bwd.median_s] for t in batch.layers])
        total = meas.sum()
        for key in set(keys):
            rows = meas[[i for i, k in enumerate(keys) if k == key]]
            if len(rows) < 2:  # a layer alone has no twin
                continue
            spread = np.abs(rows / np.median(rows, axis=0) - 1.0)
            out += list(spread[rows >= SIGNIFICANT * total])
    return out


def batch_falls(prof: Profile) -> tuple[int, int]:
    """Pairs of successive batch sizes of a significant layer pass, and those where the
    measured time *falls* as the batch grows. No model
    whose time grows with the work can follow such a pair: a floor of another kind than
    :func:`twin_spread`'s (GPU clocks, cuDNN's choice of algorithm per size, stalls)."""
    meas = np.array([[[t.fwd.median_s, t.bwd.median_s] for t in b.layers] for b in prof.batches])
    big = meas >= SIGNIFICANT * meas.sum(axis=(1, 2), keepdims=True)
    pairs = fell = 0
    for i in range(len(prof.batches) - 1):
        seen = big[i] | big[i + 1]
        pairs += int(seen.sum())
        fell += int((meas[i][seen] > meas[i + 1][seen]).sum())
    return pairs, fell


def stats(errors: list[float]) -> str:
    e = np.array(errors)
    return f"{np.median(e):.1%} / {np.percentile(e, 90):.1%} / {e.max():.1%}"


def one_h100() -> Cluster:
    """The cluster the ``h100/train`` runs were made on: one H100, device ``g.0``."""
    data = {"name": "h100-1", "nodes": [{"name": "g", "devices": [{"type": "H100-SXM"}]}]}
    return resolve_config(config_from_data(data, "h100-1"), "h100-1")


class HooksIn:
    """``HookCosts`` that take nothing out: profiles priced as main did before."""

    def hook_s(self, device_type: str) -> tuple[float, float]:
        return (0.0, 0.0)


def own_profile(store: Path, dtype: str, hooks_out: bool) -> ComputeModel:
    """``store``'s profiles, the model's own included: it prices itself (``hooks_out``: its
    windows less the hooks, as ``predict`` does; else as main did before)."""
    if hooks_out:
        return compute_model(dtype, directory=store)
    return MeasuredCompute(load_profiles(store), hooks=HooksIn())


def step_error(truth: Path, run: Path) -> str:
    data = json.loads(run.read_text())
    plan = from_data(Plan, data["plan"], str(run))
    graph = build_graph(plan.model)
    store = leave_out_store(truth, plan.model.name)
    every = leave_out_store(truth, "")
    cluster = one_h100()
    rows = []
    computes: tuple[tuple[str, ComputeModel], ...] = (
        ("own profile, less its hooks", own_profile(every, graph.dtype, True)),
        ("own profile, hooks in (before)", own_profile(every, graph.dtype, False)),
        ("learned", compute_model(graph.dtype, directory=store)),
        (
            "calibrated on stream",
            AnalyticalCompute(graph.dtype, calibrations=load_calibrations(store)),
        ),
        ("calibrated per call (before)", as_before(store, graph.dtype)),
    )
    for _, compute in computes:
        pred = predict(plan, graph, cluster, compute)
        err = pred.iteration_time_s / data["measured_iteration_s"] - 1
        rows.append(f"{pred.iteration_time_s * 1e3:.1f} ms ({err:+.1%})")
    shutil.rmtree(store)
    shutil.rmtree(every)
    return (
        f"| {run.stem} | {data['measured_iteration_s'] * 1e3:.1f} ms | " + " | ".join(rows) + " |"
    )


def main(truth: Path) -> None:
    print("| profile | learned: median / p90 / max layer error | whole model | "
          "calibrated per call (before): median / p90 / max | whole model |")  # fmt: skip
    print("|---|---|---|---|---|")
    every: dict[str, list[float]] = {"learned": [], "calibrated": []}
    by_dtype: dict[str, list[float]] = {}
    falls: dict[str, list[int]] = {}
    twins: list[float] = []
    for path in sorted((truth / "h100" / "profiles").glob("*.json")):
        prof = load_profile(path)
        store = leave_out_store(truth, prof.model)
        cells = [f"{prof.model} {prof.dtype}"]
        for label, compute in (
            ("learned", AsProfiled(store, prof.dtype)),
            ("calibrated", as_before(store, prof.dtype)),
        ):
            errors, whole = layer_errors(prof, compute)
            every[label] += errors
            if label == "learned":
                by_dtype.setdefault(prof.dtype, []).extend(errors)
            cells += [stats(errors), ", ".join(whole)]
        shutil.rmtree(store)
        twins += twin_spread(prof)
        pairs, fell = batch_falls(prof)
        count = falls.setdefault(prof.dtype, [0, 0])
        count[0], count[1] = count[0] + pairs, count[1] + fell
        print("| " + " | ".join(cells) + " |")
    for label, errors in every.items():
        print(f"\nall layers, {label}: median / p90 / max {stats(errors)} ({len(errors)} passes)")
    for dtype, errors in sorted(by_dtype.items()):
        pairs, fell = falls[dtype]
        line = f"{dtype} layers, learned: median / p90 / max {stats(errors)} ({len(errors)} passes)"
        print(f"\n{line}; measured time falls as the batch grows in {fell} of {pairs} pairs")
    print(f"\nnoise floor, layers against their twins: {stats(twins)} ({len(twins)} passes)")
    print("\n| train run | measured | own profile, less its hooks | own profile, hooks in "
          "(before) | learned | calibrated on stream | calibrated per call (before) |\n"
          "|---|---|---|---|---|---|---|")  # fmt: skip
    for run in sorted((truth / "h100" / "train").glob("*.json")):
        print(step_error(truth, run))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRUTH)
