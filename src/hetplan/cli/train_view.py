"""What ``hetplan train`` shows beside the numbers: the simulated and the executed timeline of
the plan side by side (one PNG next to the measurement file)."""

from __future__ import annotations

from pathlib import Path

from hetplan.report.charts import Bar, gantt_chart
from hetplan.run.layout import rank_roles
from hetplan.run.measure import Measurement
from hetplan.simulate.timeline import Timeline


def trace_chart(m: Measurement, timeline: Timeline, path: Path) -> Path:
    """Draw the simulated iteration (iteration 0) and the last executed step, lane per rank."""
    roles = rank_roles(m.plan)
    lane = {r.device: r.rank for r in roles}
    sim = [
        Bar(lane=lane[op.device], kind=op.kind, label=_label(op.microbatch), start=op.start,
            end=op.end)
        for op in timeline.ops()
        if op.iteration == 0 and op.device in lane
    ]  # fmt: skip
    executed = [
        Bar(lane=r.rank, kind=a.kind, label=_label(a.microbatch), start=a.start, end=a.end)
        for r in m.ranks
        for a in r.actions
    ]
    lanes = [f"rank {r.rank} {r.device}" for r in roles]
    title = f"{m.plan.model.name}: {m.plan.strategy}, {len(roles)} ranks"
    return gantt_chart(sim, executed, lanes, path, title=title)


def _label(microbatch: int) -> str:
    return "" if microbatch < 0 else str(microbatch)
