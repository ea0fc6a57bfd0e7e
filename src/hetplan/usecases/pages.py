"""``--html``: the self-contained page of a prediction or of a search's winner
(:mod:`hetplan.report.plan_page`), written by the flows that produce them."""

from __future__ import annotations

from pathlib import Path

from hetplan.plan.search import Ranking
from hetplan.predict import Prediction
from hetplan.report.plan_page import write_plan_page
from hetplan.report.plan_page_data import ParetoPoint


def write_prediction_page(path: Path, prediction: Prediction, *, title: str) -> None:
    """The page of one prediction (``predict --html``: no search, so no Pareto chart)."""
    write_plan_page(path, prediction, title=title)


def write_ranking_page(path: Path, ranking: Ranking) -> None:
    """The page of a search's winner with the time-energy chart of every ranked candidate."""
    front = {id(r) for r in ranking.pareto}
    points = [
        ParetoPoint(
            label=r.candidate.label,
            time_s=r.metrics.time_s,
            energy_j=r.metrics.energy_j,
            on_front=id(r) in front,
        )
        for r in ranking.ranked
    ]
    best = ranking.best
    chosen = points[ranking.ranked.index(best)]
    plan = best.candidate.plan
    title = f"{plan.model.name}: {best.candidate.label} on {plan.cluster or 'the cluster'}"
    write_plan_page(
        path,
        best.prediction,
        title=title,
        pareto=points,
        chosen=chosen,
        plan=plan,
        notes=ranking.notes,
    )
