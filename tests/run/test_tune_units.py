"""Units of ``hetplan tune`` (:mod:`hetplan.run.tune`) that need no run: the step budget of the
trials, each trial's length, the idle power of unused devices, the measured metrics and the
choice of the winner."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.plan.objective import Limits, Metrics, Objective
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.tune import (
    TuneSettings,
    _best_time,
    _choose,
    _trial_length,
    idle_watts,
    metrics,
    trial_budget,
)

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
TIME = Objective(weights={"time": 1.0})


def _settings(steps: int, **kw: Any) -> TuneSettings:
    return TuneSettings(objective=kw.pop("objective", TIME), steps=steps, **kw)


def _plan(*devices: str, batch: int = 8) -> Plan:
    """Data parallel over ``devices``; the first takes the remainder of an uneven split."""
    n = len(devices)
    sizes = [batch // n + (batch % n if i == 0 else 0) for i in range(n)]
    return Plan(
        model=ModelRef(name="mlp"),
        strategy="dp",
        global_batch=batch,
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=["fc0"], devices=[d])], batch=b)
            for d, b in zip(devices, sizes, strict=True)
        ],
    )


# --- trial_budget ---------------------------------------------------------------------------


def test_budget_is_warmup_plus_minimum_per_trial() -> None:
    # 3 trials x (1 warm-up + 3 timed) = 12 steps.
    assert trial_budget(3, _settings(12, warmup=1, min_timed=3)) == 12
    assert trial_budget(2, _settings(100, warmup=0, min_timed=5)) == 10


def test_budget_too_small_is_an_input_error() -> None:
    with pytest.raises(InputError, match="--steps 11: 3 trials need at least 12 steps"):
        trial_budget(3, _settings(11, warmup=1, min_timed=3))


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"trial_steps": 2, "min_timed": 3}, "--trial-steps"),
        ({"trial_steps": 20, "min_timed": 1}, "at least 2 timed steps"),  # a t interval
        ({"warmup": -1}, "--warmup"),
    ],
)
def test_bad_trial_settings_are_input_errors(kw: dict[str, int], words: str) -> None:
    with pytest.raises(InputError, match=words):
        trial_budget(1, _settings(1000, **kw))


# --- _trial_length --------------------------------------------------------------------------


def _lengths(s: TuneSettings, n: int) -> list[int]:
    """Timed steps of each of ``n`` trials when every trial runs its full length."""
    used, out = 0, []
    for i in range(n):
        timed = _trial_length(s, n - i, s.steps - used)
        out.append(timed)
        used += s.warmup + timed
    return out


def test_trial_lengths_by_hand() -> None:
    s = _settings(40, warmup=1, min_timed=3, trial_steps=20)
    # 40 // (3 + 1) - 1 = 9; then 30 // 3 - 1 = 9; then 20 // 2 - 1 = 9; 10 steps left.
    assert _lengths(s, 3) == [9, 9, 9]
    # The smallest budget: every trial gets its minimum, nothing is left for the winner.
    assert _lengths(_settings(12, warmup=1, min_timed=3), 3) == [3, 3, 3]
    # A long run: capped at trial_steps (1000 // 3 - 2 = 331 > 20).
    assert _lengths(_settings(1000, warmup=2, min_timed=3, trial_steps=20), 2) == [20, 20]
    # One trial of 30 steps: 30 // 2 - 0 = 15, half kept for the winner.
    assert _lengths(_settings(30, warmup=0, min_timed=2, trial_steps=50), 1) == [15]


def test_trials_never_use_more_than_the_total() -> None:
    """Every (steps, trials, warm-up, minimum, cap) the budget admits, by brute force."""
    checked = 0
    for steps in range(1, 70):
        for n in range(1, 6):
            for warmup in range(4):
                for min_timed in range(2, 6):
                    for cap in range(min_timed, min_timed + 8):
                        s = _settings(steps, warmup=warmup, min_timed=min_timed, trial_steps=cap)
                        if steps < n * (warmup + min_timed):
                            continue
                        lengths = _lengths(s, n)
                        assert all(min_timed <= t <= cap for t in lengths), (s, n, lengths)
                        assert sum(warmup + t for t in lengths) <= steps, (s, n, lengths)
                        checked += 1
    assert checked > 10_000


@settings(max_examples=300, deadline=None)
@given(
    steps=st.integers(1, 500),
    n=st.integers(1, 8),
    warmup=st.integers(0, 5),
    min_timed=st.integers(2, 8),
    extra=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_early_stops_keep_within_the_total(
    steps: int, n: int, warmup: int, min_timed: int, extra: int, seed: int
) -> None:
    """A trial that stops early (anywhere from its minimum on) leaves the rest enough."""
    s = _settings(steps, warmup=warmup, min_timed=min_timed, trial_steps=min_timed + extra)
    if steps < n * (warmup + min_timed):
        return
    rng = random.Random(seed)
    used = 0
    for i in range(n):
        timed = _trial_length(s, n - i, steps - used)
        assert min_timed <= timed <= s.trial_steps
        used += warmup + rng.randint(min_timed, timed)
    assert used <= steps


# --- idle power and metrics -----------------------------------------------------------------


def test_idle_watts_of_the_unused_cpus() -> None:
    cluster = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    # local-cpu-hetero: 3 devices of catalog type "cpu", 2 W idle each (local.0, .1, .2).
    assert idle_watts(_plan("local.0"), cluster) == pytest.approx(2.0 + 2.0)
    assert idle_watts(_plan("local.1", "local.2"), cluster) == pytest.approx(2.0)
    assert idle_watts(_plan("local.0", "local.1", "local.2"), cluster) == 0.0


def test_idle_watts_of_unused_gpus() -> None:
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    # hetero-2node: 4 V100-32GB (55 W idle, catalog) and 4 T4 (7% of 70 W TDP = 4.9 W idle).
    # One of each used: 3 V100 and 3 T4 idle.
    assert idle_watts(_plan("v100.0", "t4.0"), cluster) == pytest.approx(3 * 55.0 + 3 * 4.9)


def test_metrics_add_the_idle_energy() -> None:
    cluster = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    plan = _plan("local.0", batch=8)
    m = metrics(plan, cluster, time_s=2.0, energy_j=10.0, idle_w=4.0)
    assert m.energy_j == pytest.approx(10.0 + 4.0 * 2.0)
    assert m.power_w == pytest.approx(18.0 / 2.0)
    assert m.samples_per_s == pytest.approx(8 / 2.0)
    assert m.time_s == 2.0
    assert m.devices == 1
    assert m.dollars is None  # the cpu type has no price


def test_metrics_price_the_plan_devices_only() -> None:
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    plan = _plan("v100.0", "t4.0")
    m = metrics(plan, cluster, time_s=3.6, energy_j=100.0, idle_w=179.7)
    # V100-32GB: $31.212/h / 8 GPUs; T4: $0.526/h; 3.6 s = 1/1000 h.
    assert m.dollars == pytest.approx((31.212 / 8 + 0.526) / 1000)
    assert m.energy_j == pytest.approx(100.0 + 179.7 * 3.6)
    assert m.devices == 2


def test_metrics_of_a_zero_time() -> None:
    cluster = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    m = metrics(_plan("local.0"), cluster, time_s=0.0, energy_j=5.0, idle_w=4.0)
    assert (m.samples_per_s, m.power_w, m.energy_j) == (0.0, 0.0, 5.0)


# --- choosing the winner --------------------------------------------------------------------


def _trial(time_s: float, power_w: float, measured_s: float | None = None) -> SimpleNamespace:
    """What ``_choose`` and ``_best_time`` read of a Trial."""
    m = Metrics(
        time_s=time_s,
        samples_per_s=8 / time_s,
        power_w=power_w,
        energy_j=power_w * time_s,
        dollars=None,
        devices=1,
    )
    return SimpleNamespace(
        metrics=m,
        score=float("inf"),
        violations=[],
        measurement=SimpleNamespace(measured_iteration_s=measured_s or time_s),
    )


def test_choose_the_best_within_the_limits() -> None:
    trials = [_trial(1.0, 100.0), _trial(2.0, 40.0), _trial(3.0, 30.0)]
    s = _settings(100, limits=Limits(max_power_w=50.0))
    chosen, notes = _choose(trials, s)  # type: ignore[arg-type]
    assert chosen == 1  # the fastest (index 0) draws 100 W > 50 W
    assert notes == []
    assert [t.score for t in trials] == [1.0, 2.0, 3.0]
    assert trials[0].violations and not trials[1].violations and not trials[2].violations


def test_choose_by_the_objective() -> None:
    trials = [_trial(1.0, 100.0), _trial(2.0, 40.0), _trial(3.0, 30.0)]
    # Energy: 100, 80, 90 J.
    chosen, _ = _choose(trials, _settings(100, objective=Objective(weights={"energy": 1.0})))  # type: ignore[arg-type]
    assert chosen == 1


def test_choose_scales_the_deadline_by_iterations() -> None:
    trials = [_trial(2.0, 10.0), _trial(1.5, 10.0), _trial(1.8, 10.0)]
    # 60 iterations an epoch: 120 s, 90 s, 108 s against a 100 s deadline.
    s = _settings(100, limits=Limits(deadline_s=100.0), iterations=60.0)
    chosen, notes = _choose(trials, s)  # type: ignore[arg-type]
    assert chosen == 1
    assert notes == []
    assert [bool(t.violations) for t in trials] == [True, False, True]


def test_choose_falls_back_with_a_note_when_every_trial_breaks_a_limit() -> None:
    trials = [_trial(2.0, 100.0), _trial(1.0, 90.0), _trial(3.0, 80.0)]
    chosen, notes = _choose(trials, _settings(100, limits=Limits(max_power_w=50.0)))  # type: ignore[arg-type]
    assert chosen == 1  # the best score regardless
    assert len(notes) == 1
    assert "every trial broke a limit" in notes[0]
    assert all(t.violations for t in trials)


def test_best_time_only_for_time_objectives() -> None:
    trials = [_trial(2.0, 1.0, measured_s=2.5), _trial(1.0, 1.0, measured_s=1.25)]
    assert _best_time(trials, _settings(100)) == 1.25  # type: ignore[arg-type]
    throughput = _settings(100, objective=Objective(weights={"throughput": 1.0}))
    assert _best_time(trials, throughput) == 1.25  # type: ignore[arg-type]
    energy = _settings(100, objective=Objective(weights={"time": 1.0, "energy": 1.0}))
    assert _best_time(trials, energy) is None  # type: ignore[arg-type]
    assert _best_time([], _settings(100)) is None
