"""What ``hetplan train`` shows: the report (measured against predicted time, memory and energy,
losses) as text or JSON, and the power model's refit (the Gantt page beside the measurement is
:func:`hetplan.usecases.train.trace_chart`'s)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.box import SIMPLE_HEAD
from rich.table import Table

from hetplan.cli.output import console
from hetplan.plan.staleness import is_asynchronous, staleness_text
from hetplan.planspec.trace import TraceComparison
from hetplan.run.measurement.measure import Measurement, memory_error
from hetplan.serde import to_data
from hetplan.units import BYTES_NOTE, fmt_bytes, fmt_joules, fmt_percent, fmt_seconds, plural

if TYPE_CHECKING:
    from hetplan.usecases.train import PowerRefit


def print_report(
    m: Measurement, path: Path, chart: Path | None, idle: tuple[float, int] = (0.0, 0)
) -> None:
    """The run's report; ``idle``: (watts, count) of the cluster's devices the plan leaves out."""
    console.print(
        f"{m.plan.strategy} on {plural(len(m.ranks), 'rank')}: measured iteration "
        f"{fmt_seconds(m.measured_iteration_s)} (median of {plural(m.steps, 'step')} after "
        f"{m.warmup} warm-up; p10 {fmt_seconds(m.iteration_p10_s)}, "
        f"p90 {fmt_seconds(m.iteration_p90_s)})"
    )
    if m.predicted_iteration_s is not None and m.relative_error is not None:
        console.print(
            f"predicted {fmt_seconds(m.predicted_iteration_s)} ({m.prediction_source}); "
            f"relative error {fmt_percent(m.relative_error, 1, sign=True)}"
        )
    else:
        console.print(f"no prediction: {m.prediction_source}")
    if is_asynchronous(m.plan):
        console.print(
            f"asynchronous ({staleness_text(m.plan)}): the weights may be stale; iteration time "
            "is measured and predicted, the iterations needed to converge are not"
        )
    table = Table(box=SIMPLE_HEAD)
    heads = ("rank", "device", "p.s", "step", "fwd", "bwd", "opt", "wait", "peak mem", "pred mem")
    for col in heads:
        table.add_column(col, justify="left" if col == "device" else "right", no_wrap=True)
    for r in m.ranks:
        table.add_row(
            str(r.rank), r.device, f"{r.pipeline}.{r.stage}" if r.stage >= 0 else "server",
            fmt_seconds(r.step_s),
            fmt_seconds(r.forward_s), fmt_seconds(r.backward_s), fmt_seconds(r.optimizer_s),
            fmt_seconds(r.wait_s), fmt_bytes(r.peak_memory_bytes), _pred_mem(r),
        )  # fmt: skip
    console.print(table)
    console.print(
        "p.s: pipeline.stage (server: a parameter-server rank that is no worker); "
        "wait: communication not hidden by compute + idle; "
        f"peak mem: {m.ranks[0].memory_source} of the first step; pred mem: predicted without the "
        f"framework allowance (error); memory in {BYTES_NOTE}"
    )
    if m.energy_invalid is not None:
        console.print(f"metered energy rejected: {m.energy_invalid}", soft_wrap=True)
    if m.energy_j_per_iteration is not None:
        pred = m.predicted_energy_j_per_iteration
        vs = f"; predicted {fmt_joules(pred)}" if pred is not None else ""
        console.print(
            f"energy per iteration of the plan's devices {fmt_joules(m.energy_j_per_iteration)}, "
            f"{m.energy_source}{vs}"
        )
        if idle[1]:
            idle_j = idle[0] * m.measured_iteration_s
            console.print(
                f"  + {fmt_joules(idle_j)} idle power of the "
                f"{plural(idle[1], 'cluster device')} the plan leaves out (modelled) = "
                f"{fmt_joules(m.energy_j_per_iteration + idle_j)} per iteration"
            )
    if m.trace_comparison is not None:
        console.print(trace_line(m.trace_comparison))
    first = m.first_step
    console.print(
        f"losses (global-batch mean, steps {first}..{first + len(m.loss) - 1}): {_losses(m.loss)}"
    )
    if m.checkpoint is not None:
        console.print(f"checkpoint {m.checkpoint} (resume with --resume)")
    console.print(f"saved {path}" + (f" and {chart}" if chart is not None else ""))


def trace_line(c: TraceComparison) -> str:
    """Executed against simulated time per kind of action, summed over the ranks."""
    parts = []
    for kind in ("fwd", "bwd", "optimizer", "send", "recv", "allreduce"):
        rows = [r for r in c.rows if r.kind == kind]
        sim, mea = sum(r.simulated_s for r in rows), sum(r.measured_s for r in rows)
        if sim > 0 and mea > 0:
            parts.append(f"{kind} {fmt_seconds(mea)} vs {fmt_seconds(sim)}")
    err = "-" if c.median_abs_error is None else fmt_percent(c.median_abs_error, 1)
    return (
        f"executed vs simulated, summed over the ranks: {'; '.join(parts) or 'nothing to compare'}"
        f" (median |error| per rank and kind {err})"
    )


def _losses(losses: list[float], keep: int = 8) -> str:
    """Every loss, or the first and last few of a long run."""
    text = [f"{x:.4f}" for x in losses]
    if len(text) > 2 * keep:
        text = [*text[: keep // 2], "...", *text[-keep:]]
    return ", ".join(text)


def _pred_mem(r: Any) -> str:
    err = memory_error(r)
    if err is None:
        return "-"
    return f"{fmt_bytes(r.predicted_memory_bytes)} ({fmt_percent(err, sign=True)})"


def report_json(m: Measurement, path: Path, chart: Path | None, idle_w: float) -> dict[str, Any]:
    data: dict[str, Any] = {
        "predicted_iteration_s": m.predicted_iteration_s,
        "measured_iteration_s": m.measured_iteration_s,
        "relative_error": m.relative_error,
        "prediction_source": m.prediction_source,
        "iteration_p10_s": m.iteration_p10_s,
        "iteration_p90_s": m.iteration_p90_s,
        "steps": m.steps,
        "warmup": m.warmup,
        "losses": m.loss,
        "first_step": m.first_step,
        "energy_j_per_iteration": m.energy_j_per_iteration,
        "predicted_energy_j_per_iteration": m.predicted_energy_j_per_iteration,
        "energy_source": m.energy_source,
        "energy_invalid": m.energy_invalid,
        "checkpoint": m.checkpoint,
        "trace_comparison": None if m.trace_comparison is None else to_data(m.trace_comparison),
        "idle_w_of_unused_devices": idle_w,
        "ranks": [{**to_data(r), "memory_error": memory_error(r)} for r in m.ranks],
        "file": str(path),
        "trace_chart": None if chart is None else str(chart),
    }
    return data


def power_lines(refits: list[PowerRefit]) -> list[str]:
    """One line per GPU type whose power model the run refitted, or why it did not."""
    lines = []
    for r in refits:
        rec, kind = r.record, r.device_type
        if rec.refused is not None:
            lines.append(f"power model of {kind} not refitted: {rec.refused}")
        elif rec.fit is not None:
            lines.append(
                f"power model of {kind} refitted from {rec.fit.samples} measured points: idle "
                f"{rec.fit.idle_w:.0f} W, max {rec.fit.max_w:.0f} W"
            )
    return lines
