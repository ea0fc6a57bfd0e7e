"""The strategy names, once: every list of strategies in hetplan is derived from these.

A plan's ``strategy`` is one of :data:`STRATEGIES`; the groupings below say which shape of
plan each has (one stage per replica, one pipeline, several pipelines), which are
asynchronous, and which run with tensor parallelism.
"""

from __future__ import annotations

from typing import Literal, get_args

Strategy = Literal["dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

ONE_STAGE: tuple[Strategy, ...] = ("dp", "ps")
"""Replicas of the whole model: every pipeline is a single stage."""
SINGLE_PIPELINE: tuple[Strategy, ...] = ("gpipe", "1f1b", "pipedream")
"""One pipeline of stages (several pipelines are ``hybrid``)."""
PIPELINED: frozenset[str] = frozenset({*SINGLE_PIPELINE, "hybrid"})
"""Strategies that cut the model into stages and split the batch into micro-batches."""
ASYNCHRONOUS_FAMILIES: frozenset[str] = frozenset({"pipedream"})
"""Strategies whose every plan is asynchronous (hybrid and ps are by their fields: see
:mod:`hetplan.plan.staleness`)."""
FLUSHED_PIPELINE: tuple[Strategy, ...] = tuple(
    s for s in SINGLE_PIPELINE if s not in ASYNCHRONOUS_FAMILIES
)
"""Single pipelines that flush every iteration (gpipe, 1f1b)."""
RUNNABLE: tuple[Strategy, ...] = STRATEGIES
"""Strategies ``hetplan train`` executes: all of them."""
TP_RUNNABLE: tuple[Strategy, ...] = ("dp", "gpipe", "1f1b", "hybrid")
"""Strategies ``hetplan train`` executes with tensor parallelism inside their stages (hybrid
only with bsp synchronisation; ps, pipedream and wsp have no TP step yet)."""
ASYNC_VARIANTS: dict[str, Strategy] = {"ps-async": "ps", "wsp": "hybrid"}
"""Named asynchronous variants of a strategy (set by the plan's fields ``ps_async`` and
``sync``), as the benchmark suite runs them."""
