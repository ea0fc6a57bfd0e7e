"""Printing one prediction: headline figures and one row per device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetplan.cli.output import console
from hetplan.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from hetplan.predict import Prediction


def print_prediction(pred: Prediction) -> None:
    """The figures of one prediction, then one row per device."""
    ok = "[green]feasible[/]" if pred.feasible else "[red]feasible: false[/]"
    console.print(f"{pred.strategy}: {ok}   cost source: {pred.cost_source}")
    for reason in pred.infeasible_reasons:
        console.print(f"  [red]does not fit[/] {reason}")
    console.print(
        f"iteration {fmt_seconds(pred.iteration_time_s)}   throughput "
        f"{pred.samples_per_s:.1f} samples/s   batch {pred.global_batch} "
        f"(micro-batches of {', '.join(map(str, sorted(set(pred.micro_batch_sizes))))})"
    )
    if pred.epoch_time_s is not None:
        console.print(
            f"epoch {fmt_seconds(pred.epoch_time_s)} ({pred.iterations_per_epoch} iterations), "
            f"{(pred.energy_j_per_epoch or 0.0) / 3.6e6:.3f} kWh"
        )
    money = "" if pred.dollars_per_epoch is None else f"   ${pred.dollars_per_epoch:.2f}/epoch"
    console.print(
        f"power {pred.power_w:.0f} W   energy {pred.energy_j_per_iteration:.1f} J/iteration   "
        f"EDP {pred.edp:.4g} J*s (per {pred.edp_basis}){money}"
    )
    console.print(
        f"bubble {100 * pred.bubble_fraction:.1f}%   exposed communication "
        f"{fmt_seconds(pred.exposed_comm_s)} per iteration (mean over devices)"
    )
    head = (
        "device",
        "type",
        "role",
        "memory",
        "capacity",
        "busy",
        "power",
        "compute",
        "exposed comm",
        "bubble",
    )
    rows = [head]
    for d in pred.devices:
        over = " !" if d.memory_bytes > d.memory_capacity_bytes else ""
        rows.append(
            (
                d.id,
                d.type,
                d.role,
                fmt_bytes(d.memory_bytes) + over,
                fmt_bytes(d.memory_capacity_bytes),
                f"{100 * d.busy_fraction:.1f}%",
                f"{d.power_w:.0f} W",
                fmt_seconds(d.compute_s),
                fmt_seconds(d.exposed_comm_s),
                fmt_seconds(d.bubble_s),
            )
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    console.print("per device, per iteration (! = does not fit):")
    for r in rows:
        cells = [
            c.ljust(w) if k < 3 else c.rjust(w)
            for k, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        console.print("  " + "  ".join(cells), markup=False)
    for note in pred.notes:
        console.print(f"note: {note}")
