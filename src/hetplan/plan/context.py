"""What the candidate generators share: the search context and the candidate type."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hetplan.cost.comm_buckets import GradBucket
from hetplan.cost.power import dollars, energy_j, utilization_power
from hetplan.graph.types import ModelGraph
from hetplan.plan.objective import Metrics
from hetplan.plan.partition import Partition
from hetplan.plan.pricing import Pricing
from hetplan.plan.tp import members
from hetplan.planspec.plan import ModelRef, PipelinePlan, Plan
from hetplan.planspec.strategies import Strategy

SlotKey = tuple[tuple[tuple[str, ...], ...], tuple[int, ...]]
"""(devices of every slot per replica, micro-batch size per replica)."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A plan with its screening estimate. The plan is built on first use: the screening
    prices thousands of candidates by counts and only the shortlisted ones need device ids."""

    family: str
    """Strategy family shown in the ranked table (dp, ps, gpipe, 1f1b, pipedream, hybrid)."""
    label: str
    build: Callable[[], Plan]
    estimate: Metrics
    baseline: str | None = None
    """``dp-equal`` or ``equal-pipeline`` for the comparison baselines."""
    slots: tuple[tuple[str, ...], ...] = ()
    """Pipelined candidates: the slot order per replica the partitioner worked on (to refine
    the micro-batch count later)."""

    @functools.cached_property
    def plan(self) -> Plan:
        return self.build()


@dataclass(frozen=True, kw_only=True)
class Context:
    """The model, the pricing, the batch and the caches of one search."""

    model: ModelRef
    graph: ModelGraph
    pricing: Pricing
    batch: int
    optimizer: str = "sgd"
    cluster_name: str | None = None
    partitions: dict[SlotKey, Partition] = field(default_factory=dict)
    """Partitions without memory limits, per slot key."""
    buckets: dict[tuple[int, int, int], list[GradBucket]] = field(default_factory=dict)
    """DDP gradient buckets per (TP degree, first layer, end layer)."""

    @property
    def layer_names(self) -> list[str]:
        return [layer.name for layer in self.graph.layers]

    def plan(self, strategy: Strategy, pipelines: list[PipelinePlan], **kw: object) -> Plan:
        kw.setdefault("tp", len(pipelines[0].stages[0].devices))
        return Plan(
            model=self.model,
            strategy=strategy,
            global_batch=self.batch,
            pipelines=pipelines,
            optimizer=self.optimizer,  # type: ignore[arg-type]
            cluster=self.cluster_name,
            **kw,  # type: ignore[arg-type]
        )

    def metrics(self, time_s: float, busy: dict[str, float]) -> Metrics:
        """Metrics of an iteration of ``time_s`` with ``busy`` compute seconds per device."""
        return self.metrics_counts(time_s, [(slot, 1, s) for slot, s in busy.items()])

    def metrics_counts(self, time_s: float, rows: Sequence[tuple[str, int, float]]) -> Metrics:
        """``metrics`` where row ``(slot, n, seconds)`` stands for ``n`` slots like ``slot``
        each busy ``seconds`` (the symmetric screening: O(rows), not O(devices))."""
        cluster = self.pricing.cluster
        power = 0.0
        cost: float | None = 0.0
        used = 0
        for slot, n, seconds in rows:
            for dev_id in members(slot):
                used += n
                dtype = cluster.device(dev_id).type
                power += n * utilization_power(dtype, min(seconds / time_s, 1.0))
                if dtype.price_per_hour is None or cost is None:
                    cost = None
                else:
                    cost += n * dollars(dtype.price_per_hour, time_s)
        return Metrics(
            time_s=time_s,
            samples_per_s=self.batch / time_s,
            power_w=power,
            energy_j=energy_j(power, time_s),
            dollars=cost,
            devices=used,
        )
