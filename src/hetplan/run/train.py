"""Execute a plan on this machine and measure it: the library behind ``hetplan train``."""

from __future__ import annotations

from typing import Any

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.graph.split import split_program
from hetplan.plan.types import Plan
from hetplan.run.launch import launch_local
from hetplan.run.layout import check_executable
from hetplan.run.measure import Measurement, summarize
from hetplan.run.model import ModelSource, layer_names, source_for

ENTRY = "hetplan.run.worker:train_rank"


def check_plan(plan: Plan, cluster: Cluster | None, source: ModelSource) -> None:
    """InputError if the plan cannot be executed here (strategy, layers, devices, one node)."""
    check_executable(plan, layer_names(source, plan.model.depth or 1))
    if plan.num_stages > 1:  # the cut must be possible before any process starts
        split_program(source.build_meta(), [list(st.layers) for st in plan.pipelines[0].stages])
    if cluster is None:
        return
    for dev in plan.devices:
        cluster.device(dev)  # InputError for an unknown id
    nodes = {cluster.device(d).node for d in plan.devices}
    if len(nodes) > 1:
        raise InputError(
            f"the plan spans {len(nodes)} nodes ({', '.join(sorted(nodes))}); run it with the "
            "per-node torchrun commands (hetplan train --print-commands)"
        )


def run_plan(
    plan: Plan,
    *,
    cluster: Cluster | None = None,
    source: ModelSource | None = None,
    steps: int = 1,
    warmup: int = 0,
    seed: int = 0,
    return_grads: bool = False,
    timeout_s: float = 600.0,
    rdzv_timeout_s: float = 30.0,
) -> list[dict[str, Any]]:
    """Run ``warmup + steps`` steps of ``plan``; every rank's raw result, by rank.

    Rank r runs on plan device r (pipeline then stage order), pinned to its ``cpus`` when the
    cluster gives them.
    """
    src = source if source is not None else source_for(plan.model)
    check_plan(plan, cluster, src)
    if steps < 1 or warmup < 0:
        raise InputError(f"steps ({steps}) must be >= 1 and warmup ({warmup}) >= 0")
    if timeout_s <= 0:
        raise InputError(f"--timeout must be > 0 seconds (got {timeout_s:g})")
    cpus = [cluster.device(d).cpus for d in plan.devices] if cluster is not None else None
    payload = {
        "plan": plan,
        "source": src,
        "steps": steps,
        "warmup": warmup,
        "seed": seed,
        "return_grads": return_grads,
    }
    return launch_local(
        ENTRY,
        len(plan.devices),
        payload=payload,
        cpus=cpus,
        timeout_s=timeout_s,
        rdzv_timeout_s=rdzv_timeout_s,
    )


def measure_plan(
    plan: Plan,
    cluster: Cluster,
    *,
    source: ModelSource | None = None,
    steps: int = 10,
    warmup: int = 3,
    timeout_s: float = 600.0,
) -> Measurement:
    """Run ``plan`` on ``cluster``'s local devices and summarise the timed steps."""
    raw = run_plan(
        plan, cluster=cluster, source=source, steps=steps, warmup=warmup, timeout_s=timeout_s
    )
    return summarize(plan, raw, warmup=warmup, cluster=cluster.name)


def predict_plan(plan: Plan, cluster: Cluster) -> tuple[Any | None, str]:
    """The predictor's :class:`hetplan.predict.Prediction` of ``plan`` and what it used; (None,
    why) without one. Measured profiles from the profile store where they exist, the analytical
    model otherwise.
    """
    try:  # optional at run time: a missing predictor must not stop a measurement
        from hetplan.cost.compute import AnalyticalCompute  # noqa: PLC0415
        from hetplan.graph import build_graph  # noqa: PLC0415
        from hetplan.predict import predict  # noqa: PLC0415
        from hetplan.profile.measured import MeasuredCompute  # noqa: PLC0415
        from hetplan.profile.store import load_profiles  # noqa: PLC0415
    except ImportError as err:  # a partial install: measure anyway
        return None, f"predictor not available ({err})"
    graph = build_graph(plan.model)
    profiles = load_profiles()
    compute: Any = MeasuredCompute(profiles) if profiles else AnalyticalCompute(plan.model.dtype)
    kind = f"measured profiles ({len(profiles)})" if profiles else "analytical compute model"
    return predict(plan, graph, cluster, compute), kind
