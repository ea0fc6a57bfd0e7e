"""Check a plan against a model graph and a cluster before pricing it.

The plan's own structure is checked when it is built (:mod:`hetplan.planspec`); here we check
what needs the model and the cluster: each pipeline's stages cover every layer exactly once in
model order, every device id exists, and the parameter-server hosts exist. Errors are
:class:`~hetplan.errors.InputError` naming the plan field.
"""

from __future__ import annotations

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.planspec.plan import Plan


def stage_ranges(plan: Plan, graph: ModelGraph) -> list[list[tuple[int, int]]]:
    """Per pipeline, each stage's layer range ``[first, last]`` (indices into the graph).

    Raises InputError if a pipeline's stages do not list the model's layers exactly, in order,
    or if the plan has several stages and the model's forward cannot be cut into stages.
    """
    if plan.num_stages > 1 and graph.split_error is not None:
        raise InputError(
            f"plan: strategy {plan.strategy} cuts model {graph.name!r} into stages, but "
            f"{graph.split_error}"
        )
    names = [layer.name for layer in graph.layers]
    index = {n: i for i, n in enumerate(names)}
    out: list[list[tuple[int, int]]] = []
    for p, pipe in enumerate(plan.pipelines):
        ranges: list[tuple[int, int]] = []
        expect = 0
        for s, stage in enumerate(pipe.stages):
            where = f"pipelines.{p}.stages.{s}.layers"
            for k, name in enumerate(stage.layers):
                if name not in index:
                    raise InputError(
                        f"plan: {where}.{k}: {name!r} is not a layer of model {graph.name!r} "
                        f"(layers: {names[0]} .. {names[-1]}, {len(names)} in all)"
                    )
                if index[name] != expect:
                    want = names[expect] if expect < len(names) else "<end of model>"
                    raise InputError(
                        f"plan: {where}.{k}: expected layer {want!r} (stages must cover the "
                        f"model's layers in order, each once), got {name!r}"
                    )
                expect += 1
            ranges.append((expect - len(stage.layers), expect - 1))
        if expect != len(names):
            raise InputError(
                f"plan: pipelines.{p}.stages: cover {expect} of {len(names)} layers of model "
                f"{graph.name!r}; missing from {names[expect]!r} on"
            )
        out.append(ranges)
    return out


def check_devices(plan: Plan, cluster: Cluster) -> None:
    """Every device id of the plan names a device of ``cluster``."""
    known = {d.id for d in cluster.devices}
    listing = ", ".join(d.id for d in cluster.devices)
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            for k, dev in enumerate(stage.devices):
                if dev not in known:
                    raise InputError(
                        f"plan: pipelines.{p}.stages.{s}.devices.{k}: unknown device {dev!r} "
                        f"in cluster {cluster.name!r}; known: {listing}"
                    )
    for k, dev in enumerate(plan.ps_devices):
        if dev not in known:
            raise InputError(
                f"plan: ps_devices.{k}: unknown device {dev!r} in cluster {cluster.name!r}; "
                f"known: {listing}"
            )
