"""The planning flows without the CLI: typed results, the files they write, nothing printed, and
their feedback told what is slow."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hetplan.errors import InputError
from hetplan.plan.options import Progress
from hetplan.plan.stamp import stamped
from hetplan.planspec import Plan
from hetplan.profile.power_store import record_power_points
from hetplan.serde import load_file
from hetplan.usecases.feedback import Tick
from hetplan.usecases.plan import SearchRequest, make_plan, search_plans
from hetplan.usecases.predict import PlanOptions, PredictRequest, predict_plan

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu.yaml"


class Recorder:
    """Feedback that writes down what it was told."""

    def __init__(self) -> None:
        self.said: list[str] = []

    @contextlib.contextmanager
    def phase(self, text: str) -> Iterator[None]:
        self.said.append(text)
        yield

    @contextlib.contextmanager
    def search(self) -> Iterator[Progress]:
        def progress(phase: str, done: int, total: int, /, *, best: str = "") -> None:
            self.said.append(f"search: {phase}")

        yield progress

    @contextlib.contextmanager
    def run(
        self, logs: Path, ranks: int | Sequence[int], steps: int, label: str = "training"
    ) -> Iterator[Tick]:
        self.said.append(label)
        yield lambda: None

    def note(self, text: str) -> None:
        self.said.append(text)


def _request(**kw: object) -> SearchRequest:
    args: dict[str, object] = {"model": "gpt-tiny", "cluster": CLUSTER, "batch": 8}
    return SearchRequest(**(args | kw))  # type: ignore[arg-type]


def test_make_plan_writes_the_winner_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = Recorder()
    found = make_plan(_request(analytical=True), tmp_path / "plan.json", feedback=told)
    assert capsys.readouterr() == ("", "")
    assert told.said[0] == "tracing gpt-tiny" and "search: simulating" in told.said
    best = found.ranking.best.candidate.plan
    assert load_file(Plan, tmp_path / "plan.json") == stamped(best, found.cluster)
    assert found.options.batch == 8 and found.seconds >= 0


def test_a_limit_no_plan_can_meet_names_its_option_before_any_search() -> None:
    told = Recorder()
    with pytest.raises(InputError, match="--min-devices must be between 1 and"):
        search_plans(_request(min_devices=5), told)
    assert told.said == []


def test_the_search_prices_with_the_stored_power_fit(tmp_path: Path) -> None:
    record_power_points("cpu", [(0.0, 3.0), (1.0, 12.0)], tmp_path)
    fitted = search_plans(_request(profiles=tmp_path)).cluster.devices[0].type
    assert (fitted.idle_power_w, fitted.max_power_w) == pytest.approx((3.0, 12.0))
    catalog = search_plans(_request(profiles=tmp_path, analytical=True)).cluster.devices[0].type
    assert catalog.idle_power_w != pytest.approx(3.0)


def test_predict_reads_a_plan_file_or_builds_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    make_plan(_request(analytical=True), plan_file)
    told = Recorder()
    read = predict_plan(PredictRequest(cluster=CLUSTER, plan_file=plan_file), told)
    assert read.plan == load_file(Plan, plan_file)
    assert told.said == ["tracing gpt-tiny", "simulating the plan"]
    build = PlanOptions(strategy="dp", batch=8)
    out = tmp_path / "built.json"
    built = predict_plan(PredictRequest(cluster=CLUSTER, model="gpt-tiny", build=build, out=out))
    assert built.plan.strategy == "dp" and load_file(Plan, out).strategy == "dp"
    assert built.prediction.iteration_time_s > 0
    assert capsys.readouterr() == ("", "")
    with pytest.raises(InputError, match="give --plan FILE, or --model and --strategy"):
        predict_plan(PredictRequest(cluster=CLUSTER, model="gpt-tiny"))
