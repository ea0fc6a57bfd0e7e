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

from hetplan.planspec import Plan
from hetplan.run.execute.ps import hosted_params
from hetplan.run.references.reference_ps import replay_async_ps
from hetplan.run.train import run_plan


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


def test_separate_server_equals_one_process() -> None:
    """Two workers and a server-only rank ("s0", not a worker) hosting one of two shards: the
    same training as one process."""
    check_same_training(_ps("gpt-tiny", ["d1", "s0"], "size"), "gpt-tiny")


@pytest.mark.parametrize(
    ("staleness", "optimizer", "separate"),
    [(0, "sgd", False), (1, "adam", False), (1, "sgd", True)],
)
def test_async_ps_replays_in_one_process(staleness: int, optimizer: str, separate: bool) -> None:
    """Three workers, two hosts: every worker's loss at every step equals a one-process
    replay of the servers' logs (each push applied once, to the weights the logs say), and
    with a bound every pull waited until the slowest worker was at most that far behind."""
    base = make_plan("skip", "dp", 1, optimizer=optimizer, batch=8)
    hosts = ["d0", "s9"] if separate else ["d0", "d2"]
    pipes = [
        dataclasses.replace(
            base.pipelines[0],
            stages=[dataclasses.replace(base.pipelines[0].stages[0], devices=[f"d{i}"])],
            batch=4,
        )
        for i in range(3)
    ]
    plan = dataclasses.replace(
        base,
        strategy="ps",
        pipelines=pipes,
        global_batch=12,
        ps_devices=hosts,
        ps_assignment="round_robin",
        ps_async=True,
        staleness=staleness,
    )  # type: ignore[arg-type]
    steps = 5
    raw = run_plan(plan, source=_source("skip"), steps=steps, seed=2)
    workers = [r for r in raw if r.stage >= 0]  # a server-only rank has no stage
    pulled = [r.ps_pulled for r in workers]
    applied = {r.rank: r.ps_applied for r in raw if r.ps_applied}
    assert sorted(applied) == ([0, 3] if separate else [0, 2])  # s9 is rank 3 after 3 workers
    for log in applied.values():  # every push applied exactly once at each host
        assert sorted(log) == [(w, c) for w in range(3) for c in range(steps)]
    want = replay_async_ps(plan, _source("skip"), pulled, applied, seed=2)
    got = [r.loss for r in workers]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=1e-6)
    if staleness:
        for w, per_step in enumerate(pulled):
            for c, versions in enumerate(per_step[1:], start=1):
                for h, v in versions.items():
                    seen = applied[h][:v]
                    for other in range(3):  # pushes of `other` applied before w's pull
                        n = sum(1 for o, _ in seen if o == other)
                        assert n >= min(c - staleness, steps), (w, c, h, other)
