"""Learned fits from the profile store: every profiled model teaches its device type.

For a device type and dtype, the store's single-device profiles (one per model and input, the
one :func:`hetplan.profile.measured.best_profiles` would pick) give one
:class:`~hetplan.cost.learned.LayerSample` per layer, pass and batch size: the profile's median
time against the layer's calibrated class times (graph rebuilt from the profile's model name).
:func:`~hetplan.cost.learned.fit_classes` fits them. A fit is cached in
``<store>/learned/<type>__<dtype>.json`` with the profiles it came from; a store whose
profiles changed is refitted, and a store that cannot be written is refitted per command.
GPU types only: CPU profiles are taken at varying thread counts, which the fit does not model.
fp16 without profiles of its own learns from bf16's where the type's two peaks are equal (as
the analytical model borrows bf16 curves: ``cost.compute.SAME_RATE_DTYPE``), and bf16 from
fp16's (:data:`SAME_RATE_LEARNING`: public profiles are mostly fp16, ``benchmarks/data``).
"""

from __future__ import annotations

import json
from pathlib import Path

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device
from hetplan.cost.autocast_loss import with_autocast_loss
from hetplan.cost.compute import SAME_RATE_DTYPE, AnalyticalCompute
from hetplan.cost.learned import MIN_MODELS, ClassFit, LayerSample, fit_classes
from hetplan.cost.learned_compute import class_vector, pass_kernels
from hetplan.errors import InputError
from hetplan.planspec import ModelRef
from hetplan.profile.provenance import PROFILED, source_of
from hetplan.profile.store import _safe, profile_dir
from hetplan.profile.types import Profile
from hetplan.serde import from_data, to_data, write_json_atomic

SAME_RATE_LEARNING = {**SAME_RATE_DTYPE, **{b: a for a, b in SAME_RATE_DTYPE.items()}}
"""Dtype -> the dtype whose profiles teach it where a type has too few of its own and the
catalog gives both one peak (both ways: the tensor cores run fp16 and bf16 at one rate)."""

LEARNED_DIR = "learned"
"""Folder of the store that caches fits."""


def fit_path(device_type: str, dtype: str, directory: Path | None = None) -> Path:
    return profile_dir(directory) / LEARNED_DIR / f"{_safe(device_type)}__{dtype}.json"


def teaching_profiles(profiles: list[Profile], device_type: str, dtype: str) -> list[Profile]:
    """One single-device profile per model and input of the type and dtype: the widest, then
    the newest (as a prediction of that model would pick it)."""
    best: dict[tuple[str, tuple[int, ...]], Profile] = {}
    for p in profiles:
        if p.device_type != device_type or p.dtype != dtype or p.tp != 1:
            continue
        key = (p.model, tuple(p.input_shape))
        have = best.get(key)
        if have is None or (max(p.batch_sizes), p.timestamp) > (
            max(have.batch_sizes),
            have.timestamp,
        ):
            best[key] = p
    return [best[k] for k in sorted(best)]


def layer_samples(profile: Profile, analytical: AnalyticalCompute) -> list[LayerSample]:
    """The profile's layers, passes and batch sizes against their calibrated class times.
    InputError where its model cannot be rebuilt or its layers are not the graph's."""
    from hetplan.graph import build_graph  # noqa: PLC0415 (traces with torch: only to fit)

    ref = ModelRef(name=profile.model, dataset=profile.dataset, dtype=profile.dtype)
    graph = build_graph(ref)
    if [layer.name for layer in graph.layers] != list(profile.layer_names):
        raise InputError(f"profile of {profile.model}: its layers are not the model's")
    device = Device(id="learn.0", type=device_type(profile.device_type), node="learn", index=0)
    rates = analytical.class_rates(device)
    hooked = source_of(profile) == PROFILED
    layers = [with_autocast_loss(x, graph.dtype) for x in graph.layers]
    out = []
    for batch in profile.batches:
        for layer, timing in zip(layers, batch.layers, strict=True):
            for backward, stats in ((False, timing.fwd), (True, timing.bwd)):
                out.append(
                    LayerSample(
                        model=profile.model,
                        backward=backward,
                        class_s=tuple(class_vector(layer, backward, batch.batch, rates)),
                        kernels=pass_kernels(layer, backward),
                        measured_s=stats.median_s,
                        hooked=hooked,
                    )
                )
    return out


FIT_FORMAT = 5
"""The cached fits' form (2: with per-class slopes; 3: the profiler's hooks apart from the
host's issue cost; 4: the loss's autocast traffic, ``cost.autocast_loss``; 5: slopes bounded
below and held inside the sizes fitted, ``cost.learned``); a cache of another
form is refitted."""


def _sources(profiles: list[Profile]) -> list[str]:
    keys = [f"{p.model}|{p.dataset}|{p.timestamp}|{list(p.batch_sizes)}" for p in profiles]
    return [f"format {FIT_FORMAT}", *keys]


class StoreFits:
    """``FitSource`` over one store and dtype, fitting each type at most once."""

    def __init__(
        self, profiles: list[Profile], analytical: AnalyticalCompute, directory: Path | None
    ) -> None:
        self.profiles = profiles
        self.analytical = analytical
        self.directory = directory
        self._fits: dict[str, ClassFit | None] = {}

    def types(self) -> tuple[str, ...]:
        dtypes = {self.analytical.dtype, SAME_RATE_LEARNING.get(self.analytical.dtype)}
        return tuple(sorted({p.device_type for p in self.profiles if p.dtype in dtypes}))

    def fit(self, device_type: str) -> ClassFit | None:
        if device_type not in self._fits:
            self._fits[device_type] = self._fit(device_type)
        return self._fits[device_type]

    def _fit(self, type_name: str) -> ClassFit | None:
        try:
            kind = device_type(type_name)
        except InputError:
            return None  # not in the catalog: no calibrated class times to correct
        if kind.is_cpu:
            return None  # profiles differ by thread count there: not learned (yet)
        dtype = self.analytical.dtype
        teaching = teaching_profiles(self.profiles, type_name, dtype)
        other = SAME_RATE_LEARNING.get(dtype)
        if len(teaching) < MIN_MODELS and other and kind.flops(dtype) == kind.flops(other):
            dtype, teaching = other, teaching_profiles(self.profiles, type_name, other)
        if len(teaching) < MIN_MODELS:
            return None
        path, sources = fit_path(type_name, dtype, self.directory), _sources(teaching)
        own = dtype == self.analytical.dtype  # a borrowed fit is priced on this dtype's curves
        cached = _read_cache(path, sources) if own else None
        if cached is not None:
            return cached
        samples: list[LayerSample] = []
        for p in teaching:
            try:
                samples += layer_samples(p, self.analytical)
            except (InputError, ValueError):
                continue  # a model not rebuildable here (a user file moved): it cannot teach
        try:
            fit = fit_classes(samples, type_name, dtype)
        except ValueError:
            return None
        if own:
            _write_cache(path, sources, fit)
        return fit


def _read_cache(path: Path, sources: list[str]) -> ClassFit | None:
    try:
        data = json.loads(path.read_text())
        if data.get("sources") != sources:
            return None
        return from_data(ClassFit, data["fit"], str(path))
    except (OSError, ValueError, KeyError, InputError):
        return None


def _write_cache(path: Path, sources: list[str], fit: ClassFit) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"sources": sources, "fit": to_data(fit)})
    except OSError:
        pass  # a read-only store: the fit is made again next time
