"""A compute model that prefers measured profiles and falls back to the analytical one.

For a device whose type has a profile of the model: the profile's fitted ``a + k*b`` per layer,
divided by the device's speed share (source ``measured on <type>``). For a device of another
type: a measured type's times multiplied, layer by layer, by the analytical model's ratio
between the two types (source ``scaled from <type>``): the analytical model is trusted for
*relative* speed while the profile anchors the absolute level. Otherwise: the fallback.

Only single-device profiles (``tp == 1``) price a device's layers; profiles of a
tensor-parallel group's ranks are read by :meth:`MeasuredCompute.tp_layer_costs`.

Which profile prices a size (:func:`best_profiles`): one measured on purpose (``hetplan
profile`` or ``import-profile``) before one written back by ``hetplan train``, so a run never
overrides what was profiled; and a profile of one micro-batch size prices that size only (one
point cannot split the fixed per-call cost from the per-sample cost: through the origin,
gpt-tiny's 1f1b micro-batches of a quarter of the batch were priced at a quarter of its cost,
67-71 ms against 150-230 ms measured). Other sizes fall back as for an unmeasured type.

A CPU device running ``n`` threads (``cpus:``, :mod:`hetplan.cost.threads`) is priced by its
type's profile taken at the thread count nearest ``n`` (:func:`cpu_profile`; ``n`` itself
where there is one, before any other preference), its times scaled by Amdahl's law from that
count to ``n``; the source names both (``measured on cpu (1 thread, scaled to 6 threads)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.compute import CACHE_ENTRIES, AnalyticalCompute
from hetplan.cost.learned_compute import LearnedCompute, log_distance
from hetplan.cost.threads import (
    device_threads,
    known_threads,
    nearest_threads,
    thread_note,
    thread_scale,
    threads_text,
)
from hetplan.cost.types import ComputeModel, LayerCost
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.profile.hook_cost import HookCosts, net_of_hooks, profile_hooks
from hetplan.profile.provenance import WRITTEN_BACK, is_deliberate, source_of
from hetplan.profile.types import Profile


def catalog_resolver(name: str) -> DeviceType | None:
    """The catalog entry called ``name``, or None for a type the catalog does not know."""
    try:
        return device_type(name)
    except InputError:
        return None


def profile_matches(profile: Profile, graph: ModelGraph) -> bool:
    """Whether ``profile`` was taken of this model, input shape and dtype, covering its layers."""
    names = set(profile.layer_names)
    return (
        profile.model == graph.name
        and tuple(profile.input_shape) == tuple(graph.input_shape)
        and profile.dtype == graph.dtype
        and all(layer.name in names for layer in graph.layers)
    )


def prices(profile: Profile, batch: float) -> bool:
    """Whether ``profile`` prices micro-batch ``batch``: a fit over two or more sizes prices
    any size; one size only itself (module doc)."""
    return len(set(profile.batch_sizes)) > 1 or batch in profile.batch_sizes


def _rank(p: Profile) -> tuple[bool, int, int, str]:
    """Preference among matching profiles: measured on purpose, then widest batch range, then
    most sizes, then newest."""
    return (is_deliberate(p), max(p.batch_sizes), len(p.batch_sizes), p.timestamp)


def best_profiles(
    profiles: Sequence[Profile], graph: ModelGraph, tp: int = 1, batch: float | None = None
) -> dict[str, Profile]:
    """One profile of ``graph`` at tensor-parallel degree ``tp`` per device type (see
    :func:`_rank`), among those that price ``batch`` where it is given."""
    best: dict[str, Profile] = {}
    for p in profiles:
        if p.tp != tp or not profile_matches(p, graph):
            continue
        if batch is not None and not prices(p, batch):
            continue
        cur = best.get(p.device_type)
        if cur is None or _rank(p) > _rank(cur):
            best[p.device_type] = p
    return best


def cpu_profile(
    profiles: Sequence[Profile],
    graph: ModelGraph,
    device_type: str,
    threads: int,
    batch: float | None = None,
) -> tuple[Profile, int] | None:
    """The single-device profile of ``graph`` on CPU type ``device_type`` (pricing ``batch``
    where it is given) at the thread count nearest ``threads`` (``cost.threads``; a file
    without one counts as one thread), best by :func:`_rank` among those; with that count.
    None without any."""
    mine = [
        p
        for p in profiles
        if p.device_type == device_type
        and p.tp == 1
        and profile_matches(p, graph)
        and (batch is None or prices(p, batch))
    ]
    if not mine:
        return None
    have = nearest_threads({known_threads(p.threads) for p in mine}, threads)
    return max((p for p in mine if known_threads(p.threads) == have), key=_rank), have


class MeasuredCompute:
    """:class:`~hetplan.cost.types.ComputeModel` over measured profiles (see module doc)."""

    def __init__(
        self,
        profiles: Sequence[Profile],
        *,
        fallback: ComputeModel | None = None,
        types: Mapping[str, DeviceType] | None = None,
        include_loss: bool = True,
        hooks: HookCosts | None = None,
    ) -> None:
        """``fallback``: the model for unmeasured types and for the scaling ratios (default:
        :class:`AnalyticalCompute` in the graph's dtype). ``types`` resolves the device types
        profiles were taken on (for scaling); names it lacks are looked up in the catalog.
        ``include_loss`` bills the measured loss to the last layer, as the graph does for its
        analytical figures (the last pipeline stage computes the loss). ``hooks``: what the
        profiler's hooks cost per window on a GPU type (:mod:`hetplan.profile.hook_cost`),
        taken out of GPU profiles' windows."""
        self.profiles = list(profiles)
        self.hooks = hooks
        self._fallback = fallback
        self._analytical: dict[str, AnalyticalCompute] = {}
        self.types = dict(types or {})
        self.include_loss = include_loss
        self._cache: dict[tuple[object, ...], tuple[ModelGraph, list[LayerCost]]] = {}

    def fallback_for(self, graph: ModelGraph) -> ComputeModel:
        if self._fallback is not None:
            return self._fallback
        if graph.dtype not in self._analytical:
            self._analytical[graph.dtype] = AnalyticalCompute(graph.dtype)
        return self._analytical[graph.dtype]

    def _type(self, name: str) -> DeviceType | None:
        return self.types.get(name) or catalog_resolver(name)

    def _matching(self, graph: ModelGraph, batch: float | None = None) -> dict[str, Profile]:
        """One single-device profile per measured device type (pricing ``batch`` if given)."""
        return best_profiles(self.profiles, graph, batch=batch)

    def tp_layer_costs(
        self, graph: ModelGraph, device: Device, batch: int, tp: int
    ) -> list[LayerCost] | None:
        """One rank's measured costs of every layer in a tensor-parallel group of ``tp``
        devices of ``device``'s type (its share of split layers, all of replicated ones, as
        that rank ran them), divided by the speed share; None without such a profile."""
        own = best_profiles(self.profiles, graph, tp, batch).get(device.type.name)
        if own is None:
            return None
        return self._measured(own, graph, batch, 1.0 / device.speed)

    def _measured(
        self, profile: Profile, graph: ModelGraph, batch: float, scale: float, note: str = ""
    ) -> list[LayerCost]:
        hooks = profile_hooks(profile, self.hooks)
        return _measured_costs(profile, graph, batch, scale, self.include_loss, note, hooks)

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        """Measured, scaled or fallback cost of every layer (each says its source)."""
        # The planner asks for the same triples many times; the graph is kept in the value
        # so that its id cannot be reused by another graph while cached.
        key = (
            id(graph), id(device.type), device.type.name, device.speed, device_threads(device),
            batch,
        )  # fmt: skip
        hit = self._cache.get(key)
        if hit is not None and hit[0] is graph:
            return list(hit[1])
        if len(self._cache) >= CACHE_ENTRIES:
            self._cache.clear()
        costs = self._costs(graph, device, batch)
        self._cache[key] = (graph, costs)
        return list(costs)

    def own_profile(
        self, graph: ModelGraph, device: Device, batch: float | None = None
    ) -> tuple[Profile, float, str] | None:
        """The device type's profile that prices the device (at ``batch`` if given), the
        factor on its times for the device's threads, and what the source adds about them."""
        want = device_threads(device)
        if want is None:
            own = self._matching(graph, batch).get(device.type.name)
            return None if own is None else (own, 1.0, "")
        hit = cpu_profile(self.profiles, graph, device.type.name, want, batch)
        if hit is None:
            return None
        own, have = hit
        return own, thread_scale(have, want), thread_note(have, want)

    def _costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        hit = self.own_profile(graph, device, batch)
        if hit is not None:
            own, scale, note = hit
            return self._measured(own, graph, batch, scale / device.speed, note)
        measured = self._matching(graph, batch)
        refs = [
            (p, t) for name, p in sorted(measured.items()) if (t := self._type(name)) is not None
        ]
        if not refs:
            return self.fallback_for(graph).layer_costs(graph, device, batch)
        return self._scaled(graph, device, batch, refs)

    def _scaled(
        self,
        graph: ModelGraph,
        device: Device,
        batch: float,
        refs: list[tuple[Profile, DeviceType]],
    ) -> list[LayerCost]:
        fallback = self.fallback_for(graph)
        # Model times at full speed; the speed share is applied once, at the end.
        full = dataclasses.replace(device, speed=1.0)
        options = []
        for profile, ref_type in refs:
            ref_dev = _as_profiled(device, ref_type, profile)
            target, ref = _pair(fallback, graph, full, ref_dev, batch)
            distance = log_distance(target, ref)
            options.append((distance, profile, target, ref, device_threads(ref_dev)))
        _, profile, target, ref, ref_threads = min(options, key=lambda o: (o[0], o[1].device_type))
        base = self._measured(profile, graph, batch, 1.0)
        fwd_total = _ratio(sum(c.fwd_s for c in target), sum(c.fwd_s for c in ref), 1.0)
        bwd_total = _ratio(sum(c.bwd_s for c in target), sum(c.bwd_s for c in ref), 1.0)
        source = f"scaled from {profile.device_type}"
        if ref_threads is not None and ref_threads != 1:
            source += f" ({threads_text(ref_threads)})"
        source += "" if is_deliberate(profile) else " (written back)"
        return [
            LayerCost(
                fwd_s=m.fwd_s * _ratio(t.fwd_s, r.fwd_s, fwd_total) / device.speed,
                bwd_s=m.bwd_s * _ratio(t.bwd_s, r.bwd_s, bwd_total) / device.speed,
                source=source,
            )
            for m, t, r in zip(base, target, ref, strict=True)
        ]

    def optimizer_s(
        self, graph: ModelGraph, device: Device, layers: Sequence[str] | None = None
    ) -> float | None:
        """Measured optimizer-step time of ``layers`` (default: all) on ``device``: the
        profile's optimizer fit at its largest batch, shared out by parameter bytes, divided
        by the speed share. None without a profile of the device's own type."""
        hit = self.own_profile(graph, device)
        total = graph.total_param_bytes
        if hit is None or total <= 0:
            return None
        own, scale, _ = hit
        names = set(layers) if layers is not None else {x.name for x in graph.layers}
        share = sum(x.param_bytes for x in graph.layers if x.name in names) / total
        return own.step_fit.optimizer.at(max(own.batch_sizes)) * share * scale / device.speed

    def profiled_optimizer(self, graph: ModelGraph, device: Device) -> str | None:
        """The optimizer whose step the device type's profile timed (None: no profile)."""
        hit = self.own_profile(graph, device)
        return hit[0].optimizer if hit is not None else None


def _pair(
    fallback: ComputeModel, graph: ModelGraph, device: Device, ref: Device, batch: float
) -> tuple[list[LayerCost], list[LayerCost]]:
    """``device``'s and ``ref``'s times on one basis, for their ratio (a learned fallback
    prices both from their own fits or both analytically: :meth:`LearnedCompute.pair_costs`)."""
    if isinstance(fallback, LearnedCompute):
        return fallback.pair_costs(graph, device, ref, batch)
    return fallback.layer_costs(graph, device, batch), fallback.layer_costs(graph, ref, batch)


def _as_profiled(device: Device, ref_type: DeviceType, profile: Profile) -> Device:
    """``device`` as the reference profile ran: of its type, at full speed, and on as many
    cores as it had threads (what prices a CPU type, ``cost.threads``)."""
    cores = tuple(range(known_threads(profile.threads)))
    return dataclasses.replace(device, type=ref_type, speed=1.0, cpus=cores)


def _measured_costs(
    profile: Profile,
    graph: ModelGraph,
    batch: float,
    scale: float,
    include_loss: bool,
    note: str = "",
    hooks: tuple[float, float] | None = None,
) -> list[LayerCost]:
    """The profile's costs times ``scale`` (threads over speed share), each window less
    ``hooks`` (forward, backward: :mod:`hetplan.profile.hook_cost`) where given; ``note`` goes
    after the type in the source."""
    source = f"measured on {profile.device_type}{note}"
    if profile.tp > 1:
        source += f" (tp {profile.tp})"
    if source_of(profile) == WRITTEN_BACK:
        source += " (written back)"
    if hooks is not None:
        source += ", less its hooks"
    fits = {f.name: f for f in profile.fits}
    last = profile.fits[-1].name
    loss = profile.step_fit.loss
    out = []
    hook_f, hook_b = hooks if hooks is not None else (0.0, 0.0)
    for layer in graph.layers:
        fit = fits[layer.name]
        fwd, bwd = net_of_hooks(fit.fwd.at(batch), hook_f), net_of_hooks(fit.bwd.at(batch), hook_b)
        if include_loss and layer.name == last:
            fwd += net_of_hooks(loss.fwd.at(batch), hook_f)
            bwd += net_of_hooks(loss.bwd.at(batch), hook_b)
        out.append(LayerCost(fwd_s=fwd * scale, bwd_s=bwd * scale, source=source))
    return out


def _ratio(num: float, den: float, default: float) -> float:
    """``num / den``, or ``default`` where the reference cost is zero."""
    return num / den if den > 0 else default
