"""The parameter server trains as its schedule says (real processes, gloo, CPU).

Synchronous: the same losses at every step and the same gradients as one process over the
global batch (what data parallelism gives), whatever the shard assignment; the optimizer
state lives only on each shard's host."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_run_fidelity import _source, check_same_training, make_plan
from torch import nn

from hetplan.errors import InputError
from hetplan.plan.types import Plan
from hetplan.run.layout import check_executable
from hetplan.run.model import layer_names
from hetplan.run.ps import hosted_params


def _ps(name: str, servers: list[str], policy: str = "size", optimizer: str = "adam") -> Plan:
    plan = make_plan(name, "dp", 1, optimizer=optimizer)
    return dataclasses.replace(plan, strategy="ps", ps_devices=servers, ps_assignment=policy)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "servers", "policy"),
    [
        ("skip", ["d0", "d1"], "size"),
        ("tied_lm", ["d1"], "round_robin"),
        ("gpt-tiny", ["d0", "d1"], "size"),
    ],
)
def test_sync_ps_equals_one_process(name: str, servers: list[str], policy: str) -> None:
    check_same_training(_ps(name, servers, policy), name)


def test_shards_follow_the_assignment_by_hand() -> None:
    """Round robin over two hosts: tensors 0, 2, 4 on the first, 1, 3 on the second."""
    plan = _ps("skip", ["d0", "d1"], "round_robin")
    params = [
        [nn.Parameter(torch.zeros(n)) for n in (3, 1)],
        [nn.Parameter(torch.zeros(n)) for n in (5, 2, 4)],
    ]
    flat = [p for layer in params for p in layer]
    hosts = hosted_params(plan, params)
    assert [id(p) for p in hosts[0]] == [id(flat[i]) for i in (0, 2, 4)]
    assert [id(p) for p in hosts[1]] == [id(flat[i]) for i in (1, 3)]
    by_size = hosted_params(dataclasses.replace(plan, ps_assignment="size"), params)
    # Greedy by bytes: 3 -> h0, 1 -> h1, 5 -> h1 (1 < 3), 2 -> h0 (3 < 6), 4 -> h0 (5 < 6).
    assert [id(p) for p in by_size[0]] == [id(flat[i]) for i in (0, 3, 4)]


def test_separate_servers_are_refused() -> None:
    plan = _ps("skip", ["d0"])
    plan = dataclasses.replace(plan, ps_devices=["x9"])
    with pytest.raises(InputError, match="ps_devices: x9 is not a worker"):
        check_executable(plan, layer_names(_source("skip")))
