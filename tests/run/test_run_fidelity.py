"""Every executable family trains the same network as one process, for models whose forward is
not a chain of children (skip connection, a module called twice, tuple and dict values, tied
weights) and for the zoo's small nets: the same loss at every step and the same gradients as
:func:`hetplan.run.references.reference.reference_run` (real processes, gloo, CPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.model import ZooSource, layer_names
from hetplan.run.train import run_plan

MODELS = Path(__file__).with_name("fidelity_models.py")
STEPS = 3


def _source(name: str) -> ZooSource:
    return ZooSource(name=f"{MODELS}:{name}" if name.islower() and "-" not in name else name)


def _stages(layers: list[str], n: int) -> list[list[str]]:
    bounds = [round(k * len(layers) / n) for k in range(n + 1)]
    return [layers[bounds[k] : bounds[k + 1]] for k in range(n)]


def make_plan(
    name: str, family: str, stages: int, *, micro: int = 4, batch: int = 8, optimizer: str = "adam"
) -> Plan:
    layers = layer_names(_source(name))
    groups = _stages(layers, stages)
    replicas = 2 if family in ("dp", "hybrid") else 1
    batches = [batch, batch // 2] if replicas == 2 else [batch]
    dev = iter(f"d{i}" for i in range(16))
    pipes = [
        PipelinePlan(stages=[StagePlan(layers=g, devices=[next(dev)]) for g in groups], batch=b)
        for b in batches
    ]
    return Plan(
        model=ModelRef(name=_source(name).name),
        strategy=family,  # type: ignore[arg-type]
        global_batch=sum(batches),
        micro_batches=micro if family != "dp" else 2,
        pipelines=pipes,
        optimizer=optimizer,  # type: ignore[arg-type]
    )


def check_same_training(plan: Plan, name: str) -> None:
    source = _source(name)
    raw = run_plan(plan, source=source, steps=STEPS, seed=5, return_grads=True)
    losses, grads = reference_run(plan, source, seed=5, steps=STEPS)
    got = [sum(r.loss[i] for r in raw if r.loss[i] is not None) for i in range(STEPS)]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(losses), rtol=1e-5, atol=1e-6)
    seen: set[str] = set()
    for r in raw:
        for key, g in r.grads.items():
            torch.testing.assert_close(
                g, grads[key], rtol=1e-4, atol=1e-6, msg=f"rank {r.rank} {key}"
            )
            seen.add(key)
    assert seen == set(grads)


CUSTOM = ["skip", "reused", "tuple_dict", "tied_lm", "top_level"]


@pytest.mark.parametrize("name", CUSTOM)
@pytest.mark.parametrize(("family", "stages"), [("gpipe", 3), ("1f1b", 2), ("hybrid", 2)])
def test_custom_forward_trains_the_same_network(name: str, family: str, stages: int) -> None:
    check_same_training(make_plan(name, family, stages), name)


@pytest.mark.parametrize("name", ["reused", "tied_lm"])
def test_custom_forward_1f1b_three_stages_and_dp(name: str) -> None:
    check_same_training(make_plan(name, "1f1b", 3, micro=2), name)
    check_same_training(make_plan(name, "dp", 1), name)


@pytest.mark.parametrize(
    ("name", "family", "stages"),
    [
        ("gpt-tiny", "1f1b", 3),
        ("gpt-tiny", "hybrid", 2),
        ("resnet-tiny", "gpipe", 2),
        ("resnet-tiny", "dp", 1),
        ("bert-tiny", "1f1b", 2),
        ("bert-tiny", "gpipe", 3),
    ],
)
def test_zoo_models_train_the_same_network(name: str, family: str, stages: int) -> None:
    check_same_training(make_plan(name, family, stages), name)


@pytest.mark.parametrize(
    ("name", "family", "stages", "dtype"),
    [
        ("tied_lm", "1f1b", 2, "bf16"),
        ("gpt-tiny", "hybrid", 2, "bf16"),
        ("skip", "gpipe", 3, "fp16"),
    ],
)
def test_mixed_precision_trains_the_same_network(
    name: str, family: str, stages: int, dtype: str
) -> None:
    """Autocast over fp32 master weights (fp16 with the loss scaler): the pipeline's steps
    equal one process's under the same autocast, and its weights stay fp32."""
    plan = make_plan(name, family, stages)
    plan = dataclasses.replace(plan, model=dataclasses.replace(plan.model, dtype=dtype))
    check_same_training(plan, name)
