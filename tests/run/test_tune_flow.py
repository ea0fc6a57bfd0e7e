"""``tune``'s flow with the runs replaced by a stand-in (no processes): the state passes from
trial to trial and on to the winner, a failed trial is dropped without its steps, the settings
reach every run, and bad candidates are refused before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.plan.objective import Objective
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run import tune as tune_mod
from hetplan.run.launch.spawn import RunError
from hetplan.run.measurement.measure import Measurement
from hetplan.run.train import Training
from hetplan.run.tune import Candidate, TuneSettings, tune

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "clusters" / "local-cpu-hetero.yaml")
MODEL = f"{ROOT}/examples/data/blobs.py:model"


def _cand(label: str, device: str, predicted_s: float) -> Candidate:
    plan = Plan(
        model=ModelRef(name=MODEL), strategy="dp", global_batch=8, micro_batches=1,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=["0", "1", "2", "3", "4"],
                                                  devices=[device])], batch=8)],
    )  # fmt: skip
    return Candidate(label=label, plan=plan, predicted_s=predicted_s, predicted_energy_j=1.0)


class FakeRuns:
    """Stands for ``measure_plan``: each plan's iteration time by its device; a run of
    ``fail`` raises RunError; every call's training settings are kept."""

    def __init__(self, times: dict[str, float], fail: str | None = None) -> None:
        self.times, self.fail = times, fail
        self.calls: list[tuple[str, int, int, Training]] = []

    def __call__(self, plan: Plan, cluster: Any, **kw: Any) -> Measurement:
        device = plan.devices[0]
        training: Training = kw["training"]
        self.calls.append((device, kw["warmup"], kw["steps"], training))
        if device == self.fail:
            raise RunError("rank 0 failed: killed by signal SIGKILL (out of memory?)")
        t = self.times[device]
        assert training.checkpoint_dir is not None
        return Measurement(
            plan=plan, cluster=None, steps=kw["steps"], warmup=kw["warmup"],
            measured_iteration_s=t, iteration_p10_s=t, iteration_p90_s=t,
            iteration_s=[t] * kw["steps"], loss=[1.0] * (kw["steps"] + kw["warmup"]),
            ranks=[], checkpoint=str(training.checkpoint_dir / "step-x"),
        )  # fmt: skip


def _settings(**kw: Any) -> TuneSettings:
    return TuneSettings(objective=Objective(weights={"time": 1.0}), steps=40, lr=0.05, **kw)


def test_state_flows_through_the_trials_to_the_winner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = FakeRuns({"local.0": 0.3, "local.1": 0.1, "local.2": 0.2})
    monkeypatch.setattr(tune_mod, "measure_plan", runs)
    cands = [_cand("a", "local.0", 0.1), _cand("b", "local.1", 0.2), _cand("c", "local.2", 0.3)]
    result = tune(cands, CLUSTER, _settings(), tmp_path)
    assert result.chosen == 1 and result.predicted_best == 0  # measured b, predicted a
    resumes = [call[3].resume for call in runs.calls]
    assert resumes == [
        None,
        tmp_path / "trial-0" / "step-x",
        tmp_path / "trial-1" / "step-x",
        tmp_path / "trial-2" / "step-x",  # the winner resumes the last trial's state
    ]
    assert runs.calls[-1][0] == "local.1"  # the winner trains on
    assert all(call[3].lr == 0.05 for call in runs.calls)
    # 40 steps, 3 trials of 1 + 9 (a fair quarter each), the winner the remaining 10.
    assert [(w, s) for _, w, s, _ in runs.calls] == [(1, 9), (1, 9), (1, 9), (0, 10)]
    assert result.total_steps == 40


def test_a_failed_trial_is_dropped_and_costs_no_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = FakeRuns({"local.0": 0.3, "local.2": 0.2}, fail="local.1")
    monkeypatch.setattr(tune_mod, "measure_plan", runs)
    cands = [_cand("a", "local.0", 0.1), _cand("b", "local.1", 0.2), _cand("c", "local.2", 0.3)]
    result = tune(cands, CLUSTER, _settings(), tmp_path)
    assert [t.candidate.label for t in result.trials] == ["a", "c"]
    assert result.trials[result.chosen].candidate.label == "c"
    assert runs.calls[2][3].resume == tmp_path / "trial-0" / "step-x"  # skips the failed one
    assert result.total_steps == 40
    assert any("trial 2 (b) failed" in note for note in result.notes)


def test_every_trial_failing_is_a_run_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tune_mod, "measure_plan", FakeRuns({}, fail="local.0"))
    with pytest.raises(RunError, match="every trial failed"):
        tune([_cand("a", "local.0", 0.1)], CLUSTER, _settings(), tmp_path)


def test_a_bad_candidate_is_refused_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = FakeRuns({"local.0": 0.3})
    monkeypatch.setattr(tune_mod, "measure_plan", runs)
    with pytest.raises(InputError, match="nowhere"):
        tune([_cand("a", "local.0", 0.1), _cand("b", "nowhere", 0.1)], CLUSTER, _settings(),
             tmp_path)  # fmt: skip
    assert runs.calls == []
