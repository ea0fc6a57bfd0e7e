"""Predict one explicit plan: time, throughput, memory, power, energy, EDP and dollars.

``predict`` checks the plan against the model and the cluster, prices it
(:mod:`hetplan.predict.price`), builds the strategy's schedule, simulates it, and adds memory
(:mod:`hetplan.predict.plan_memory`) and power (busy fraction from the timeline into
``cost.power.utilization_power``). Devices pinned to the same CPU cores are re-priced with
the speed the simulated overlap gives them (:mod:`hetplan.predict.sharing`). An infeasible
plan is an answer (``feasible=False`` with the reasons), never an exception; bad input raises
:class:`~hetplan.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from hetplan.cluster.spec import Cluster
from hetplan.cost import power as pw
from hetplan.cost.memory import MemoryBreakdown
from hetplan.cost.tp import tp_splits
from hetplan.cost.types import ComputeModel
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.planspec.plan import Plan
from hetplan.predict.check import check_devices, stage_ranges
from hetplan.predict.error_bars import Interval
from hetplan.predict.plan_memory import infeasible_reasons, memory_warnings, plan_memory
from hetplan.predict.price import price
from hetplan.predict.sharing import (
    SHARING_ROUNDS,
    core_groups,
    shared_speeds,
    tp_ranks,
    with_speeds,
)
from hetplan.schedule.builder import paused_gc
from hetplan.schedule.plan_schedule import build_schedule
from hetplan.simulate import Timeline, simulate


@dataclass(frozen=True, kw_only=True)
class DevicePrediction:
    """One device's share of the prediction (times per iteration)."""

    id: str
    type: str
    role: str
    """``worker``, ``ps`` or ``worker+ps``."""
    memory_bytes: float
    memory_capacity_bytes: float
    memory: dict[str, float]
    """Breakdown: weights, grads, optimizer, activations, stashed_weights, comm_buffers,
    framework, ps_shard."""
    busy_fraction: float
    power_w: float
    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    memory_verdict: str = "fits"
    """``fits``, ``may not fit`` (within the feasibility margin) or ``does not fit``
    (:mod:`hetplan.cost.memory_margin`)."""
    memory_margin: float = 1.0
    """The device kind's feasibility margin: the factor on the predicted terms less the
    framework allowance."""

    def to_json(self) -> dict[str, Any]:
        """``asdict(self)``: plain fields and a copy of ``memory`` (asdict's deep copy costs
        seconds over the devices of a large search's ranking)."""
        out = {name: getattr(self, name) for name in _DEVICE_FIELDS}
        out["memory"] = dict(self.memory)
        return out


_DEVICE_FIELDS = tuple(f.name for f in fields(DevicePrediction))
_BREAKDOWN_TERMS = tuple(f.name for f in fields(MemoryBreakdown) if f.name != "total")
"""The terms of a device's memory breakdown (every field but the total; all floats)."""


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Everything ``hetplan predict`` reports for one plan."""

    feasible: bool
    infeasible_reasons: list[str]
    strategy: str
    iteration_time_s: float
    samples_per_s: float
    global_batch: int
    micro_batch_sizes: list[int]
    iterations_per_epoch: int | None
    epoch_time_s: float | None
    power_w: float
    """Sum over the plan's devices of their average power."""
    energy_j_per_iteration: float
    energy_j_per_epoch: float | None
    edp: float
    """Energy-delay product, J*s, over an epoch when the dataset size is known, else over one
    iteration (see ``edp_basis``)."""
    edp_basis: str
    dollars_per_iteration: float | None
    dollars_per_epoch: float | None
    """None unless every device has a price."""
    bubble_fraction: float
    exposed_comm_s: float
    cost_source: str
    devices: list[DevicePrediction]
    timeline: Timeline = field(repr=False)
    notes: list[str] = field(default_factory=list)
    layer_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Device type -> layer -> what priced it (a profile, a learned fit, a calibration or the
    catalog: ``cost_source``'s labels, layer by layer)."""
    recompute: str = "off"
    """Which micro-batches the plan recomputes, in words (``Plan.recompute_text``)."""
    zero: int | None = None
    """A sharded plan's ZeRO stage (``fsdp``, a hybrid's ``shard_stages``); else None."""
    interval: Interval | None = None
    """Where the measured iteration time should fall (:mod:`hetplan.predict.error_bars`); set
    by the flows that know the profile store, None from :func:`predict` itself."""
    memory_warnings: list[str] = field(default_factory=list)
    """Devices that fit their capacity but not with the feasibility margin (``may not fit``):
    the plan is offered, flagged, and ranked after the plans that fit."""

    @property
    def memory_verdict(self) -> str:
        """The plan's worst device verdict: ``fits``, ``may not fit`` or ``does not fit``."""
        if not self.feasible:
            return "does not fit"
        return "may not fit" if self.memory_warnings else "fits"

    def to_json(self, *, timeline: bool = False) -> dict[str, Any]:
        """Plain data (JSON-compatible); ``timeline`` adds every simulated op."""
        # Not asdict(self): it would deep-copy the whole timeline.
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "timeline"}
        out["devices"] = [d.to_json() for d in self.devices]
        out["infeasible_reasons"] = list(self.infeasible_reasons)
        out["micro_batch_sizes"] = list(self.micro_batch_sizes)
        out["notes"] = list(self.notes)
        out["memory_warnings"] = list(self.memory_warnings)
        out["memory_verdict"] = self.memory_verdict
        out["interval"] = asdict(self.interval) if self.interval is not None else None
        if timeline:
            out["timeline"] = [
                {
                    "device": o.device,
                    "kind": o.kind,
                    "stage": o.stage,
                    "microbatch": o.microbatch,
                    "pipeline": o.pipeline,
                    "iteration": o.iteration,
                    "start": o.start,
                    "end": o.end,
                }
                for o in self.timeline.spans()
            ]
        return out


def predict(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    *,
    dataset_size: int | None = None,
) -> Prediction:
    """Predict ``plan`` for ``graph`` on ``cluster`` with layer costs from ``compute``."""
    ranges = stage_ranges(plan, graph)
    check_devices(plan, cluster)
    priced = price(plan, graph, cluster, compute, ranges)
    memory = plan_memory(plan, graph, cluster, ranges, priced.micro_batch, priced.bucket_bytes)
    reasons = infeasible_reasons(memory)
    with paused_gc():  # big schedules: see paused_gc
        timeline = simulate(build_schedule(plan, priced))
        groups = core_groups(cluster, plan.devices)
        for _ in range(SHARING_ROUNDS if groups else 0):
            shared = with_speeds(cluster, shared_speeds(timeline, groups, tp_ranks(plan)))
            priced = price(plan, graph, shared, compute, ranges)
            timeline = simulate(build_schedule(plan, priced))
    t_iter = timeline.iteration_time_s
    workers = set(plan.devices)
    devices: list[DevicePrediction] = []
    for dev_id in timeline.schedule.devices:
        dev = cluster.device(dev_id)
        split = timeline.devices[dev_id]
        mem = memory[dev_id]
        role = "worker" if dev_id in workers else "ps"
        if dev_id in workers and dev_id in plan.ps_devices:
            role = "worker+ps"
        breakdown = {k: getattr(mem.breakdown, k) for k in _BREAKDOWN_TERMS}
        breakdown["ps_shard"] = mem.ps_shard_bytes
        devices.append(
            DevicePrediction(
                id=dev_id,
                type=dev.type.name,
                role=role,
                memory_bytes=mem.total_bytes,
                memory_capacity_bytes=mem.capacity_bytes,
                memory=breakdown,
                busy_fraction=split.busy_fraction,
                power_w=pw.utilization_power(dev.type, split.busy_fraction),
                compute_s=split.compute_s,
                exposed_comm_s=split.exposed_comm_s,
                bubble_s=split.bubble_s,
                memory_verdict=mem.verdict,
                memory_margin=mem.margin,
            )
        )
    power = sum(d.power_w for d in devices)
    e_iter = pw.energy_j(power, t_iter)
    if dataset_size is not None and dataset_size < 1:
        raise InputError(f"dataset size must be >= 1 sample (got {dataset_size})")
    iters = math.ceil(dataset_size / plan.global_batch) if dataset_size is not None else None
    epoch = iters * t_iter if iters is not None else None
    e_epoch = pw.energy_j(power, epoch) if epoch is not None else None
    prices = [cluster.device(d.id).type.price_per_hour for d in devices]
    hourly = None if any(p is None for p in prices) else sum(p or 0.0 for p in prices)
    return Prediction(
        feasible=not reasons,
        infeasible_reasons=reasons,
        memory_warnings=memory_warnings(memory),
        strategy=plan.strategy,
        recompute=plan.recompute_text,
        zero=plan.zero if plan.strategy == "fsdp" or plan.shard_stages else None,
        iteration_time_s=t_iter,
        samples_per_s=timeline.samples_per_s,
        global_batch=plan.global_batch,
        micro_batch_sizes=priced.micro_batch,
        iterations_per_epoch=iters,
        epoch_time_s=epoch,
        power_w=power,
        energy_j_per_iteration=e_iter,
        energy_j_per_epoch=e_epoch,
        edp=pw.edp(e_epoch, epoch)
        if e_epoch is not None and epoch is not None
        else pw.edp(e_iter, t_iter),
        edp_basis="epoch" if epoch is not None else "iteration",
        dollars_per_iteration=None if hourly is None else pw.dollars(hourly, t_iter),
        dollars_per_epoch=None if hourly is None or epoch is None else pw.dollars(hourly, epoch),
        bubble_fraction=timeline.bubble_fraction,
        exposed_comm_s=timeline.exposed_comm_s,
        cost_source=", ".join(priced.sources) or "none",
        layer_sources=layer_sources(priced.layer_sources),
        devices=devices,
        timeline=timeline,
        notes=list(timeline.schedule.notes) + _tp_notes(plan, graph),
    )


def untraced_tp_notes(plan: Plan, graph: ModelGraph) -> list[str]:
    """A TP plan on a model with blocks torch.fx could not trace: those layers are computed
    whole on every TP rank (their units are unknown); [] otherwise."""
    untraced = graph.untraced() if plan.tp > 1 else ""
    if not untraced:
        return []
    return [
        f"tp {plan.tp}: torch.fx could not trace a module in {untraced}: every TP rank "
        "computes such a layer whole (its attention and MLP units are unknown)"
    ]


def _tp_notes(plan: Plan, graph: ModelGraph) -> list[str]:
    """A TP plan on a model with blocks torch.fx could not trace: those layers are computed
    whole on every rank; a TP plan whose degree splits no layer: so is every stage."""
    if plan.tp == 1:
        return []
    notes = untraced_tp_notes(plan, graph)
    if any(tp_splits(layer, plan.tp) for layer in graph.layers):
        return notes
    return [
        *notes,
        f"tp {plan.tp}: no layer of {graph.name} splits at this degree (no attention or MLP "
        "unit with whole heads per rank, no vocabulary divisible by it): every TP rank "
        "computes its stage whole",
    ]


def layer_sources(triples: tuple[tuple[str, str, str], ...]) -> dict[str, dict[str, str]]:
    """(device type, layer, source) triples as device type -> layer -> source."""
    out: dict[str, dict[str, str]] = {}
    for kind, layer, source in triples:
        out.setdefault(kind, {})[layer] = source
    return out
