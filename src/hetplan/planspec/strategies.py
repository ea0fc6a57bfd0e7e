"""The strategies, each one frozen :class:`StrategySpec`: everything hetplan knows of a strategy.

A plan's ``strategy`` is one of :data:`STRATEGIES`. What depends on it (the plan's shape, its
micro-batch order, whether it is asynchronous or runs as a window of iterations, whether tensor
parallelism runs with it, which executor runs it, and the one rule "why this plan cannot run")
is asked of the spec (:func:`spec_of`), by the search, the predictor, the memory model, the
runtime and the benchmark suite alike; the schedule generator of each strategy is in
:data:`hetplan.schedule.plan_schedule.GENERATORS`. Adding a strategy is a spec here, a
generator there and (if no existing one fits) an executor kind in ``hetplan.run``.

Pure data and functions over a plan: no torch, nothing of hetplan above this leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from hetplan.planspec.order import Order, RecomputeHeld, in_flight, recompute_held

if TYPE_CHECKING:
    from hetplan.planspec.plan import Plan

Strategy = Literal["dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid", "fsdp"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

Shape = Literal["replicas", "pipeline", "pipelines"]
"""``replicas``: every pipeline is one stage (the whole model); ``pipeline``: exactly one
pipeline of stages; ``pipelines``: several pipelines of the same stages."""
ExecutorKind = Literal["flushed", "window", "ps", "ps-async", "fsdp"]
"""How a rank runs its actions: one flushed iteration per step, a window of iterations with no
flush, a synchronous or an asynchronous parameter-server step, a replica of a sharded model
(FSDP2 gathers and scatters inside its forward and backward)."""

PlanRule = Callable[["Plan"], bool]


def _never(plan: Plan) -> bool:
    return False


def _always(plan: Plan) -> bool:
    return True


def _wsp(plan: Plan) -> bool:
    return plan.sync == "wsp"


def _ps_async(plan: Plan) -> bool:
    return plan.ps_async


def _shard_stages(plan: Plan) -> bool:
    return plan.shard_stages


@dataclass(frozen=True, kw_only=True)
class StrategySpec:
    """One strategy: data, and the rules every package asks instead of testing its name."""

    name: Strategy
    title: str
    """One line, as help texts show it."""
    shape: Shape
    order: Order
    """Each stage's micro-batch order (:mod:`hetplan.planspec.order`)."""
    continuous: bool = False
    """Micro-batches stream across iterations with no flush (PipeDream): a stage holds as
    many in flight as the pipeline's warm-up allows, whatever ``micro_batches`` is."""
    tensor_parallel: bool = False
    """Tensor parallelism runs inside its stages (not when windowed: no TP window step)."""
    stashes_weights: bool = False
    """Each stage keeps a weight version per micro-batch in flight (PipeDream)."""
    hosts_parameters: bool = False
    """Parameter servers hold the weights: replicas push gradients and pull weights instead
    of all-reducing."""
    shards_state: bool = False
    """Each replica holds a shard of the training state (ZeRO): of the optimizer state only
    (``zero`` 1), or of the weights, gradients and optimizer state too (2 and 3, FSDP2:
    :meth:`gathers_weights`)."""
    asynchronous_if: PlanRule = _never
    """A forward pass may use weights that miss a completed update."""
    windowed_if: PlanRule = _never
    """Runs several iterations as one schedule with no flush (PipeDream, HetPipe's WSP)."""
    shards_stages_if: PlanRule = _never
    """The replicas of each pipeline stage shard its state with FSDP2 (hybrid's
    ``shard_stages``) instead of all-reducing its gradients."""

    def asynchronous(self, plan: Plan) -> bool:
        return self.asynchronous_if(plan)

    def windowed(self, plan: Plan) -> bool:
        return self.windowed_if(plan)

    def executor(self, plan: Plan) -> ExecutorKind:
        """The executor kind a rank of ``plan`` runs."""
        if self.windowed(plan):
            return "window"
        if self.hosts_parameters:
            return "ps-async" if self.asynchronous(plan) else "ps"
        return "fsdp" if self.gathers_weights(plan) else "flushed"

    def gathers_weights(self, plan: Plan) -> bool:
        """Weights and gradients are sharded too (ZeRO-2/3, FSDP2): layers are gathered for
        their use and gradients reduce-scattered, no all-reduce."""
        return (self.shards_state and plan.zero >= 2) or self.shards_stages_if(plan)

    def shards_optimizer_only(self, plan: Plan) -> bool:
        """Only the optimizer state is sharded (ZeRO-1): gradients all-reduced as ``dp``
        does, each owner steps its parameters and broadcasts them."""
        return self.shards_state and plan.zero == 1

    def syncs_replicas(self, plan: Plan) -> bool:
        """Replicas all-reduce their gradients (several pipelines, no parameter server)."""
        return len(plan.pipelines) > 1 and not (self.hosts_parameters or self.gathers_weights(plan))

    def in_flight(self, stage: int, num_stages: int, micro_batches: int) -> int:
        """Micro-batches whose activations ``stage`` holds at its peak, from the order."""
        n = micro_batches + num_stages if self.continuous else micro_batches
        return in_flight(self.order, stage, num_stages, n)

    def recompute_held(
        self, stage: int, num_stages: int, micro_batches: int, *, except_last: bool
    ) -> RecomputeHeld:
        """What ``stage`` holds at its peak when it checkpoints its forward (every
        micro-batch, or all but each iteration's last): :func:`recompute_held`."""
        n = micro_batches + num_stages if self.continuous else micro_batches
        return recompute_held(
            self.order, stage, num_stages, n, micro_batches, except_last=except_last
        )

    def stashed_versions(self, stage: int, num_stages: int, micro_batches: int = 1) -> int:
        """Extra weight versions ``stage`` stashes: one per older weight version among its
        micro-batches in flight (PipeDream, Narayanan et al. 2019, updates per micro-batch:
        one per micro-batch beyond the current one). Weights change once per iteration of
        ``micro_batches``, so the ``k - 1`` in flight beyond the newest span at most
        ``ceil((k - 1) / micro_batches)`` older versions: the runtime keeps one copy per
        version (``run/execute/window.py``). None without weight stashing."""
        if not self.stashes_weights:
            return 0
        older = self.in_flight(stage, num_stages, 1) - 1
        return -(-older // max(micro_batches, 1))

    def tp_runs(self, plan: Plan) -> bool:
        return self.tensor_parallel and not self.windowed(plan)

    def why_unrunnable(self, plan: Plan) -> str | None:
        """Why ``hetplan train`` cannot run ``plan`` (naming the field), or None: the one rule
        the search and the runtime share."""
        if plan.tp != 1 and not self.tp_runs(plan):
            variant = " wsp" if plan.sync == "wsp" else ""
            runs = ", ".join(s.name for s in SPECS.values() if s.tensor_parallel)
            return (
                f"tp: tensor parallelism (tp = {plan.tp}) runs with {runs} (BSP), "
                f"not with {self.name}{variant} yet"
            )
        if self.shards_stages_if(plan) and plan.tp != 1:
            return f"shard_stages: FSDP2 inside tensor-parallel stages (tp = {plan.tp}) not yet"
        if self.shape != "replicas":
            for i, pipe in enumerate(plan.pipelines):
                if pipe.batch % plan.micro_batches:
                    return (
                        f"pipelines.{i}.batch ({pipe.batch}) must be a multiple of "
                        f"micro_batches ({plan.micro_batches}) to run (pipeline stages "
                        "exchange fixed-shape micro-batches)"
                    )
        if plan.model.dtype == "fp16" and self.asynchronous(plan):
            return (
                "model.dtype: fp16's loss scaling skips a step on every rank together; an "
                f"asynchronous plan ({self.name}) has no common step (use bf16 or fp32)"
            )
        return None


SPECS: dict[str, StrategySpec] = {
    s.name: s
    for s in (
        StrategySpec(
            name="dp", title="data parallelism: a whole replica per device",
            shape="replicas", order="1f1b", tensor_parallel=True,
        ),
        StrategySpec(
            name="ps", title="parameter server: replicas push gradients, pull weights",
            shape="replicas", order="1f1b", hosts_parameters=True, asynchronous_if=_ps_async,
        ),
        StrategySpec(
            name="gpipe", title="GPipe: all forwards, then all backwards, flushed",
            shape="pipeline", order="gpipe", tensor_parallel=True,
        ),
        StrategySpec(
            name="1f1b", title="1F1B (PipeDream-Flush): one forward, one backward, flushed",
            shape="pipeline", order="1f1b", tensor_parallel=True,
        ),
        StrategySpec(
            name="pipedream", title="PipeDream: asynchronous 1F1B with weight stashing",
            shape="pipeline", order="1f1b", continuous=True, stashes_weights=True,
            asynchronous_if=_always, windowed_if=_always,
        ),
        StrategySpec(
            name="hybrid", title="HetPipe: pipelines (virtual workers) in data parallel",
            shape="pipelines", order="1f1b", tensor_parallel=True,
            asynchronous_if=_wsp, windowed_if=_wsp, shards_stages_if=_shard_stages,
        ),
        StrategySpec(
            name="fsdp", title="sharded data parallelism (ZeRO-1/2/3; FSDP2): a replica per device",
            shape="replicas", order="1f1b", shards_state=True,
        ),
    )
}  # fmt: skip
"""Every strategy's spec, by name, in :data:`STRATEGIES` order."""


def spec_of(plan_or_name: Plan | str) -> StrategySpec:
    """The spec of a plan's strategy (or of a strategy name)."""
    name = plan_or_name if isinstance(plan_or_name, str) else plan_or_name.strategy
    try:
        return SPECS[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; expected one of {STRATEGIES}") from None


def names_where(rule: Callable[[StrategySpec], bool]) -> tuple[Strategy, ...]:
    """Strategy names whose spec satisfies ``rule``, in :data:`STRATEGIES` order."""
    return tuple(s.name for s in SPECS.values() if rule(s))


ONE_STAGE: tuple[Strategy, ...] = names_where(lambda s: s.shape == "replicas")
"""Replicas of the whole model: every pipeline is a single stage."""
SINGLE_PIPELINE: tuple[Strategy, ...] = names_where(lambda s: s.shape == "pipeline")
"""One pipeline of stages (several pipelines are ``hybrid``)."""
PIPELINED: frozenset[str] = frozenset(names_where(lambda s: s.shape != "replicas"))
"""Strategies that cut the model into stages and split the batch into micro-batches."""
ASYNCHRONOUS_FAMILIES: frozenset[str] = frozenset(
    names_where(lambda s: s.asynchronous_if is _always)
)
"""Strategies whose every plan is asynchronous (hybrid and ps are by their fields)."""
FLUSHED_PIPELINE: tuple[Strategy, ...] = names_where(
    lambda s: s.shape == "pipeline" and s.asynchronous_if is _never
)
"""Single pipelines that flush every iteration (gpipe, 1f1b)."""
RUNNABLE: tuple[Strategy, ...] = STRATEGIES
"""Strategies ``hetplan train`` executes: all of them."""
TP_RUNNABLE: tuple[Strategy, ...] = names_where(lambda s: s.tensor_parallel)
"""Strategies ``hetplan train`` executes with tensor parallelism inside their stages (hybrid
only with bsp synchronisation)."""
ASYNC_VARIANTS: dict[str, Strategy] = {"ps-async": "ps", "wsp": "hybrid"}
"""Named asynchronous variants of a strategy (set by the plan's fields ``ps_async`` and
``sync``), as the benchmark suite runs them."""
SUITE_VARIANTS: dict[str, Strategy] = {**ASYNC_VARIANTS, "zero1": "fsdp", "hybrid-fsdp": "hybrid"}
"""Every named variant the benchmark suite runs: the asynchronous ones, ZeRO-1 (field
``zero``) and pipelines of FSDP2-sharded stages (``shard_stages``)."""
