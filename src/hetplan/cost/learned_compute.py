"""A compute model that prices every model on a device type from what other models taught.

Per device (issue 30, items 3 and 4):

1. its type has a :class:`~hetplan.cost.learned.ClassFit` in the dtype (profiles of other
   models on it): each layer's calibrated class times through the fit, source ``learned on
   <type> from <n> models``;
2. else, a GPU whose type has no data and a GPU type that has a fit: the fitted type nearest
   it (by its analytical time of the model), its learned times times the catalog's ratio of
   the two types, layer by layer (peak per dtype and memory
   bandwidth through the roofline, as Habitat scales across GPUs; the host side is kept as
   learned), source ``learned on <ref>, scaled to <type> by specs``;
3. else the analytical model (calibrated or catalog) as before.

Which fits exist is the :class:`FitSource`'s business (:mod:`hetplan.profile.learn` reads them
from the profile store, lazily: a command that never prices such a device fits nothing).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device
from hetplan.cost.autocast_loss import with_autocast_loss
from hetplan.cost.compute import (
    BWD_WEIGHT_PASSES,
    CACHE_ENTRIES,
    FWD_WEIGHT_PASSES,
    AnalyticalCompute,
)
from hetplan.cost.learned import ClassFit
from hetplan.cost.op_classes import ClassRates, class_times
from hetplan.cost.types import LayerCost
from hetplan.errors import InputError
from hetplan.graph.types import OP_CLASSES, LayerInfo, ModelGraph


class FitSource(Protocol):
    """Learned fits by device type, in one dtype."""

    def fit(self, device_type: str) -> ClassFit | None:
        """The type's fit, None where its store has too little to learn from."""
        ...

    def types(self) -> tuple[str, ...]:
        """Device types that may have a fit (those with profiles), without fitting any."""
        ...


class LearnedCompute:
    """``ComputeModel``: learned where a fit covers the device, else ``analytical`` (module doc)."""

    def __init__(self, analytical: AnalyticalCompute, fits: FitSource) -> None:
        self.analytical = analytical
        self.fits = fits
        self._costs: dict[tuple[object, ...], tuple[ModelGraph, list[LayerCost]]] = {}

    def _reference(self, graph: ModelGraph, device: Device, batch: float) -> ClassFit | None:
        """The fitted GPU type to scale an unfitted GPU from: the one whose analytical time
        of this model is nearest the device's (ties by name). Taken as the first by name,
        the A100 priced the RTX 3090 from the same models' profiles 52% off where the RTX
        2080 Ti did 5% (``benchmarks/bench_gpu_types.py --pairs``)."""
        if device.type.is_cpu:
            return None
        mine = self.analytical.layer_costs(graph, device, batch)
        best: tuple[float, ClassFit] | None = None
        for name in sorted(self.fits.types()):
            fit = None if name == device.type.name or _is_cpu_type(name) else self.fits.fit(name)
            if fit is None:
                continue
            ref_dev = dataclasses.replace(device, type=device_type(name), speed=1.0)
            gap = log_distance(mine, self.analytical.layer_costs(graph, ref_dev, batch))
            if best is None or gap < best[0]:
                best = (gap, fit)
        return None if best is None else best[1]

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        key = (id(graph), device.type.name, device.speed, device.cpus, batch)
        hit = self._costs.get(key)
        if hit is not None and hit[0] is graph:
            return list(hit[1])
        costs = self._price(graph, device, batch)
        if len(self._costs) >= CACHE_ENTRIES:
            self._costs.clear()
        self._costs[key] = (graph, costs)
        return list(costs)

    def _price(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        if not any(layer.work for layer in graph.layers):
            return self.analytical.layer_costs(graph, device, batch)
        fit = self.fits.fit(device.type.name)
        if fit is not None:
            return self.learned(graph, device, batch, fit)
        ref = self._reference(graph, device, batch)
        if ref is None:
            return self.analytical.layer_costs(graph, device, batch)
        return self._scaled(graph, device, batch, ref)

    def pair_costs(
        self, graph: ModelGraph, device: Device, ref: Device, batch: float
    ) -> tuple[list[LayerCost], list[LayerCost]]:
        """``device``'s and ``ref``'s layer times on one basis, for a measured profile's
        scaling from ``ref`` to ``device``: each from its own type's fit where both types
        have one, else both analytically. A fit on one side and the other priced through
        some third type's fit would put the two fits' difference into the ratio: with six
        GPU types in one store, that took ``scaled from`` forward errors from 3-5% (RTX 2080
        Ti and RTX 3090, each from the other alone) to 94% (``benchmarks/bench_gpu_types.py``)."""
        if self._fitted(device) and self._fitted(ref):
            return self.layer_costs(graph, device, batch), self.layer_costs(graph, ref, batch)
        analytical = self.analytical
        return analytical.layer_costs(graph, device, batch), analytical.layer_costs(
            graph, ref, batch
        )

    def _fitted(self, device: Device) -> bool:
        return not device.type.is_cpu and self.fits.fit(device.type.name) is not None

    def hook_s(self, device_type: str) -> tuple[float, float] | None:
        """Per pass (forward, backward), what ``hetplan profile``'s hooks add to each layer
        window on ``device_type`` (:mod:`hetplan.cost.learned`); None without a fit of it."""
        fit = self.fits.fit(device_type)
        return None if fit is None else fit.hook_s

    def learned(
        self,
        graph: ModelGraph,
        device: Device,
        batch: float,
        fit: ClassFit,
        *,
        hooked: bool = False,
    ) -> list[LayerCost]:
        """Every layer through ``fit`` on ``device``'s own calibrated class times, as a training
        step runs it (``hooked``: as ``hetplan profile`` times it, hooks and all)."""
        rates = self.analytical.class_rates(device)
        scale = self.analytical.time_scale(device)
        label = fit.label
        if fit.dtype != self.analytical.dtype:
            label += f" ({fit.dtype} profiles: same peak)"
        # Identical layers (a transformer's blocks) have equal work: each priced once.
        memo: dict[tuple[object, ...], LayerCost] = {}
        out = []
        for layer in (with_autocast_loss(x, graph.dtype) for x in graph.layers):
            key = (layer.work, layer.param_bytes, layer.fwd_kernels, layer.bwd_kernels)
            cost = memo.get(key)
            if cost is None:
                fwd, bwd = (
                    fit.seconds(
                        class_vector(layer, b, batch, rates),
                        pass_kernels(layer, b),
                        b,
                        hooked=hooked,
                    )
                    * scale
                    for b in (False, True)
                )
                cost = memo[key] = LayerCost(fwd_s=fwd, bwd_s=bwd, source=label)
            out.append(cost)
        return out

    def _scaled(
        self, graph: ModelGraph, device: Device, batch: float, fit: ClassFit
    ) -> list[LayerCost]:
        ref_dev = dataclasses.replace(device, type=device_type(fit.device_type), speed=1.0)
        learned = self.learned(graph, ref_dev, batch, fit)
        ref = self.analytical.layer_costs(graph, ref_dev, batch)
        mine = self.analytical.layer_costs(graph, device, batch)
        source = f"learned on {fit.device_type}, scaled to {device.type.name} by specs"
        return [
            LayerCost(
                fwd_s=lc.fwd_s * _ratio(m.fwd_s, r.fwd_s),
                bwd_s=lc.bwd_s * _ratio(m.bwd_s, r.bwd_s),
                source=source,
            )
            for lc, r, m in zip(learned, ref, mine, strict=True)
        ]


def class_vector(layer: LayerInfo, backward: bool, batch: float, rates: ClassRates) -> list[float]:
    """The layer's calibrated seconds per class of :data:`OP_CLASSES` (the fit's ``T_c``)."""
    passes = BWD_WEIGHT_PASSES if backward else FWD_WEIGHT_PASSES
    times = class_times(layer, backward, batch, passes, rates)
    return [times.get(c, 0.0) for c in OP_CLASSES]


def pass_kernels(layer: LayerInfo, backward: bool) -> int:
    """Kernels the layer launches in one pass (the fit's ``K``)."""
    return layer.bwd_kernels if backward else layer.fwd_kernels


def log_distance(a: list[LayerCost], b: list[LayerCost]) -> float:
    """How far apart two devices are for a model: |log| of their total-time ratio."""
    ta = sum(c.fwd_s + c.bwd_s for c in a)
    tb = sum(c.fwd_s + c.bwd_s for c in b)
    if ta <= 0 or tb <= 0:
        return math.inf
    return abs(math.log(ta / tb))


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else 1.0


def _is_cpu_type(name: str) -> bool:
    """CPU types, and types the catalog does not know, serve as no GPU's reference."""
    try:
        return device_type(name).is_cpu
    except InputError:
        return True
