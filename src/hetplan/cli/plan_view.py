"""Printing a ranking: the ranked table, the winner's stage map, reasons, Pareto front."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hetplan.cli.output import console
from hetplan.plan.search import Ranked, Ranking
from hetplan.plan.staleness import is_asynchronous, staleness_of, staleness_text
from hetplan.serde import to_data
from hetplan.units import fmt_bytes, fmt_seconds


def table_rows(ranking: Ranking, top: int) -> list[Ranked]:
    """The best plan of each family and the baselines, best first, at most ``top``."""
    rows: list[Ranked] = []
    seen: set[str] = set()
    extra = [b for b in ranking.baselines.values() if b not in ranking.ranked]
    for r in sorted([*ranking.ranked, *extra], key=lambda r: r.score):
        if r.candidate.baseline is not None:
            rows.append(r)
        elif r.candidate.family not in seen:
            rows.append(r)
            seen.add(r.candidate.family)
    return rows[:top]


def _headroom(r: Ranked) -> str:
    devs = r.prediction.devices
    if not devs:
        return "-"
    free = min(1.0 - d.memory_bytes / d.memory_capacity_bytes for d in devs)
    return f"{free:.0%}"


def print_ranking(ranking: Ranking, top: int, seconds: float) -> None:
    t = Table(title=f"best plans per strategy family (objective: {ranking.objective.name})")
    for col in ("#", "plan", "devices", "staleness", "iteration", "epoch", "samples/s", "headroom"):
        t.add_column(col, justify="left" if col in ("plan", "staleness") else "right")
    for col in ("power W", "energy J/it", "EDP J*s"):
        t.add_column(col, justify="right")
    for i, r in enumerate(table_rows(ranking, top), 1):
        p = r.prediction
        tag = f" [dim]({r.candidate.baseline} baseline)[/]" if r.candidate.baseline else ""
        epoch = "-" if p.epoch_time_s is None else fmt_seconds(p.epoch_time_s)
        t.add_row(
            str(i),
            r.candidate.label + tag,
            str(r.metrics.devices),
            staleness_text(r.candidate.plan),
            fmt_seconds(p.iteration_time_s),
            epoch,
            f"{p.samples_per_s:.1f}",
            _headroom(r),
            f"{p.power_w:.0f}",
            f"{p.energy_j_per_iteration:.1f}",
            f"{r.metrics.edp:.3g}",
        )
    console.print(t)
    for name, why in ranking.baseline_failures.items():
        console.print(f"baseline {name}: infeasible ({why})")
    _print_stage_map(ranking.best)
    for reason in ranking.reasons:
        console.print(f"- {reason}")
    front = ", ".join(
        f"{fmt_seconds(r.metrics.time_s)} / {r.metrics.energy_j:.0f} J" for r in ranking.pareto
    )
    console.print(f"time-energy Pareto front (iteration / energy): {front}")
    console.print(
        f"searched {ranking.screened} candidates, simulated {ranking.simulated}, in {seconds:.2f} s"
    )


def _print_stage_map(best: Ranked) -> None:
    plan = best.candidate.plan
    mem = {d.id: d for d in best.prediction.devices}
    console.print(f"winner: {best.candidate.label} (cost source: {best.prediction.cost_source})")
    for i, pipe in enumerate(plan.pipelines):
        parts = []
        for stage in pipe.stages:
            used = " ".join(
                f"{d} {fmt_bytes(mem[d].memory_bytes)}/{fmt_bytes(mem[d].memory_capacity_bytes)}"
                for d in stage.devices
                if d in mem
            )
            span = (
                stage.layers[0]
                if len(stage.layers) == 1
                else (f"{stage.layers[0]}..{stage.layers[-1]}")
            )
            parts.append(f"[{span} ({len(stage.layers)} layers) on {used}]")
        console.print(f"  pipeline {i} (batch {pipe.batch}): " + " -> ".join(parts), markup=False)


def ranked_json(r: Ranked) -> dict[str, Any]:
    plan = r.candidate.plan
    return {
        "family": r.candidate.family,
        "label": r.candidate.label,
        "baseline": r.candidate.baseline,
        "score": r.score,
        "asynchronous": is_asynchronous(plan),
        "staleness": staleness_of(plan),
        "staleness_text": staleness_text(plan),
        "plan": to_data(plan),
        "prediction": r.prediction.to_json(),
    }


def ranking_json(ranking: Ranking, seconds: float) -> dict[str, Any]:
    return {
        "objective": ranking.objective.name,
        "best": ranked_json(ranking.best),
        "candidates": [ranked_json(r) for r in ranking.ranked],
        "baselines": {k: ranked_json(v) for k, v in ranking.baselines.items()},
        "baseline_failures": dict(ranking.baseline_failures),
        "rejected": dict(ranking.rejected),
        "pareto": [ranked_json(r) for r in ranking.pareto],
        "reasons": list(ranking.reasons),
        "screened": ranking.screened,
        "simulated": ranking.simulated,
        "search_seconds": seconds,
        "time_limited": list(ranking.time_limited),
    }
