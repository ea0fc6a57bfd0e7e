"""How stale the weights of an asynchronous plan can be, in optimizer steps (iterations).

Plans are ranked on what the simulator predicts per iteration (time, energy, power, cost).
An asynchronous plan buys its shorter iteration by letting a forward pass run on weights that
miss some of the latest updates; that can cost extra iterations to converge, which nothing in
hetplan models. This module states the bound so that the ranking can show it next to the
iteration time, and so that ``hetplan plan`` can leave such plans out unless asked.

- Synchronous families (dp, gpipe, 1f1b, synchronous ps, hybrid with BSP): 0.
- PipeDream (asynchronous 1F1B, weight stashing, no flush): stage ``s`` of ``S`` runs
  ``S - 1 - s`` warm-up forwards, so with ``m`` micro-batches per optimizer step a forward
  can run up to ``ceil((S - 1 - s) / m)`` steps behind a synchronous schedule; the bound is
  stage 0's,
  ``ceil((S - 1) / m)`` (Narayanan et al. 2019, "PipeDream").
- Hybrid with HetPipe's wave-synchronous parallel (WSP): a replica may run up to ``D``
  (``Plan.staleness``) waves ahead of the slowest, one wave being one iteration; its pipeline
  runs 1F1B continuously across waves, which adds the same ``ceil((S - 1) / m)`` (Park et
  al. 2020, "HetPipe"). The sum is an upper bound: hetplan's simulated WSP order
  (``schedule.pipeline.insert_optimizer`` with lag ``D + 1``) reaches the larger of the two.
- Asynchronous parameter server: the stale-synchronous bound ``Plan.staleness`` (Ho et al.
  2013, SSP); without one (0) a worker's update waits for nobody, so there is no bound.
"""

from __future__ import annotations

from hetplan.planspec.plan import Plan
from hetplan.planspec.strategies import ASYNCHRONOUS_FAMILIES, spec_of

__all__ = [
    "ASYNCHRONOUS_FAMILIES",
    "is_asynchronous",
    "pipeline_lag",
    "staleness_of",
    "staleness_text",
]


def is_asynchronous(plan: Plan) -> bool:
    """Whether a forward pass of ``plan`` may use weights that miss a completed update."""
    return spec_of(plan).asynchronous(plan)


def pipeline_lag(plan: Plan) -> int:
    """``ceil((S - 1) / m)``: optimizer steps stage 0's warm-up forwards can run behind when
    a pipeline of ``S`` stages runs 1F1B over ``m`` micro-batches per step without a flush."""
    return -(-(plan.num_stages - 1) // plan.micro_batches)


def staleness_of(plan: Plan) -> int | None:
    """The staleness bound of ``plan`` in iterations (optimizer steps); 0 for synchronous
    plans, None for an asynchronous parameter server without a bound."""
    spec = spec_of(plan)
    if not spec.asynchronous(plan):
        return 0
    if spec.hosts_parameters:
        return plan.staleness or None
    return pipeline_lag(plan) + (0 if spec.continuous else plan.staleness)


def staleness_text(plan: Plan) -> str:
    """Short form for a table cell: ``sync``, ``async ≤1 it``, ``WSP D=2 (+1)``."""
    spec = spec_of(plan)
    if not spec.asynchronous(plan):
        return "sync"
    if not spec.hosts_parameters and not spec.continuous:  # waves: HetPipe's WSP
        lag = pipeline_lag(plan)
        return f"WSP D={plan.staleness}" + (f" (+{lag})" if lag else "")
    bound = staleness_of(plan)
    return "async, unbounded" if bound is None else f"async ≤{bound} it"
