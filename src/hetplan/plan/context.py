"""What the candidate generators share: the search context and the candidate type."""

from __future__ import annotations

from dataclasses import dataclass, field

from hetplan.cost.power import dollars, energy_j, utilization_power
from hetplan.graph.types import ModelGraph
from hetplan.plan.objective import Metrics
from hetplan.plan.partition import Partition
from hetplan.plan.pricing import Pricing
from hetplan.plan.tp import members
from hetplan.plan.types import ModelRef, PipelinePlan, Plan, Strategy

SlotKey = tuple[tuple[tuple[str, ...], ...], tuple[int, ...]]
"""(devices of every slot per replica, micro-batch size per replica)."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A plan with its screening estimate."""

    family: str
    """Strategy family shown in the ranked table (dp, ps, gpipe, 1f1b, pipedream, hybrid)."""
    label: str
    plan: Plan
    estimate: Metrics
    baseline: str | None = None
    """``dp-equal`` or ``equal-pipeline`` for the comparison baselines."""
    slots: tuple[tuple[str, ...], ...] = ()
    """Pipelined candidates: the slot order per replica the partitioner worked on (to refine
    the micro-batch count later)."""


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
        cluster = self.pricing.cluster
        power = 0.0
        cost: float | None = 0.0
        used = 0
        for slot, seconds in busy.items():
            for dev_id in members(slot):
                used += 1
                dtype = cluster.device(dev_id).type
                power += utilization_power(dtype, min(seconds / time_s, 1.0))
                if dtype.price_per_hour is None or cost is None:
                    cost = None
                else:
                    cost += dollars(dtype.price_per_hour, time_s)
        return Metrics(
            time_s=time_s,
            samples_per_s=self.batch / time_s,
            power_w=power,
            energy_j=energy_j(power, time_s),
            dollars=cost,
            devices=used,
        )
