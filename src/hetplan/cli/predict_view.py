"""Printing one prediction: headline figures and one row per device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetplan.cli.output import console
from hetplan.units import (
    BYTES_NOTE,
    fmt_bytes,
    fmt_dollars,
    fmt_duration,
    fmt_joules,
    fmt_percent,
    fmt_seconds,
    plural,
)

if TYPE_CHECKING:
    from hetplan.predict import Prediction
    from hetplan.predict.predict import DevicePrediction


MAX_DEVICE_ROWS = 32
"""Device rows printed; a data-parallel plan over 1,000 devices would print 1,000."""
MAX_MEMORY_LINES = 8
NAMED = 3  # devices named on a memory line (the others counted)
"""Distinct memory breakdowns printed (devices holding the same are listed on one line)."""
TERM_NAMES = {
    "activations": "activations",
    "backward_workspace": "backward workspace",
    "stage_inputs": "received inputs",
    "autocast_loss": "loss log-softmax (fp32)",
    "cast_cache": "autocast weight copies",
    "stashed_weights": "stashed weights",
    "comm_buffers": "gradient buckets",
    "gathered": "gathered layers (fsdp)",
    "optimizer_step": "optimizer step temporaries",
    "ps_shard": "parameter-server shard",
    "framework": "framework allowance",
}
"""The memory terms (``cost.memory.MemoryBreakdown``) as a user reads them; others as named."""
VERDICT_MARKS = {"does not fit": " !", "may not fit": " ?"}
"""The device table's mark after a memory that does not fit, or fits only without the
feasibility margin (``cost.memory_margin``)."""


def _print_recompute(pred: Prediction) -> None:
    """Which micro-batches the plan recomputes, when it does."""
    if pred.recompute != "off":
        console.print(f"recompute: {pred.recompute}", markup=False)


def print_prediction(pred: Prediction) -> None:
    """The figures of one prediction, then one row per device."""
    ok = "[green]feasible[/]" if pred.feasible else "[red]feasible: false[/]"
    if pred.feasible and pred.memory_warnings:
        ok = "[yellow]feasible, but may not fit[/]"
    zero = f" zero-{pred.zero}" if pred.zero is not None else ""
    console.print(f"{pred.strategy}{zero}: {ok}   cost source: {pred.cost_source}")
    for reason in pred.infeasible_reasons:
        console.print(f"  [red]does not fit[/] {reason}")
    for warning in pred.memory_warnings:
        console.print(f"  [yellow]{warning}[/]")
    console.print(
        f"iteration {fmt_duration(pred.iteration_time_s)}   throughput "
        f"{pred.samples_per_s:.1f} samples/s   batch {pred.global_batch} "
        f"(micro-batches of {', '.join(map(str, sorted(set(pred.micro_batch_sizes))))})"
    )
    if pred.interval is not None:
        iv = pred.interval
        console.print(
            f"  {iv.coverage:.0%} interval of the iteration: {iv.text()} ({iv.basis})",
            markup=False,
        )
    _print_recompute(pred)
    if pred.epoch_time_s is not None:
        iters = plural(pred.iterations_per_epoch or 0, "iteration")
        energy = pred.energy_j_per_epoch or 0.0
        console.print(
            f"epoch of {iters}: {fmt_duration(pred.epoch_time_s)}, "
            f"{fmt_joules(energy)} ({energy / 3.6e6:.3g} kWh)"
        )
    console.print(
        f"power {pred.power_w:.0f} W (mean over the iteration)   energy "
        f"{fmt_joules(pred.energy_j_per_iteration)}/iteration   {edp_text(pred)}{_money(pred)}"
    )
    console.print(
        f"bubble {fmt_percent(pred.bubble_fraction, 1)}   exposed communication "
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
    shown = pred.devices[:MAX_DEVICE_ROWS]
    for d in shown:
        over = VERDICT_MARKS.get(d.memory_verdict, "")
        rows.append(
            (
                d.id,
                d.type,
                d.role,
                fmt_bytes(d.memory_bytes) + over,
                fmt_bytes(d.memory_capacity_bytes),
                fmt_percent(d.busy_fraction, 1),
                f"{d.power_w:.0f} W",
                fmt_seconds(d.compute_s),
                fmt_seconds(d.exposed_comm_s),
                fmt_seconds(d.bubble_s),
            )
        )
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    console.print(
        f"per device, per iteration (! = does not fit, ? = may not fit; memory in {BYTES_NOTE}):"
    )
    for r in rows:
        cells = [
            c.ljust(w) if k < 3 else c.rjust(w)
            for k, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        console.print("  " + "  ".join(cells), markup=False)
    if len(pred.devices) > len(shown):
        worst = max(pred.devices, key=lambda d: d.memory_bytes / d.memory_capacity_bytes)
        console.print(
            f"  ... {plural(len(pred.devices) - len(shown), 'more device')} (--json lists "
            f"all); fullest memory: {worst.id} {fmt_bytes(worst.memory_bytes)} of "
            f"{fmt_bytes(worst.memory_capacity_bytes)}",
            markup=False,
        )
    for line in source_lines(pred.layer_sources):
        console.print(line, markup=False)
    for line in memory_lines(pred.devices):
        console.print(line, markup=False)
    for line in margin_lines(pred.devices):
        console.print(line, markup=False)
    for note in pred.notes:
        console.print(f"note: {note}")


def source_lines(sources: dict[str, dict[str, str]]) -> list[str]:
    """Which source priced which layers, per device type, in runs of consecutive layers; none
    where one source priced every layer (the headline's cost source says it)."""
    if len({s for layers in sources.values() for s in layers.values()}) <= 1:
        return []
    lines = ["cost source per layer (--json: layer_sources):"]
    for kind, layers in sources.items():
        runs: list[tuple[list[str], str]] = []
        for layer, source in layers.items():
            if runs and runs[-1][1] == source:
                runs[-1][0].append(layer)
            else:
                runs.append(([layer], source))
        parts = [f"{_span_of(names)}: {source}" for names, source in runs]
        lines.append(f"  {kind}: " + "; ".join(parts))
    return lines


def _span_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]} ({len(names)} layers)"


def memory_lines(devices: list[DevicePrediction]) -> list[str]:
    """What each device's memory is made of, largest term first, one line per distinct
    breakdown (the devices holding it named first): why a plan does or does not fit."""
    groups: dict[tuple[tuple[str, int], ...], list[DevicePrediction]] = {}
    for d in devices:
        terms = tuple(sorted((k, round(v)) for k, v in d.memory.items() if v >= 1))
        groups.setdefault(terms, []).append(d)
    ordered = sorted(groups.items(), key=lambda kv: -max(d.memory_bytes for d in kv[1]))
    lines = ["memory terms per device (largest first):"]
    for terms, held in ordered[:MAX_MEMORY_LINES]:
        more = f" (+{len(held) - NAMED})" if len(held) > NAMED else ""
        names = ", ".join(d.id for d in held[:NAMED]) + more
        parts = sorted(terms, key=lambda kv: -kv[1])
        text = ", ".join(f"{TERM_NAMES.get(k, k)} {fmt_bytes(v)}" for k, v in parts)
        lines.append(f"  {names}: {text}")
    if len(ordered) > MAX_MEMORY_LINES:
        lines.append(f"  ... {plural(len(ordered) - MAX_MEMORY_LINES, 'more breakdown')} (--json)")
    return lines


def margin_lines(devices: list[DevicePrediction]) -> list[str]:
    """The feasibility margin of each device kind, and the device fullest with it: what the
    device must have (its framework allowance plus the margin times its other terms) against
    its capacity (``cost.memory_margin``)."""
    if not devices:
        return []
    from hetplan.cost.memory_margin import with_margin  # noqa: PLC0415 (hetplan.cost: numpy)

    def needed(d: DevicePrediction) -> float:
        fw = d.memory.get("framework", 0.0)
        return with_margin(d.memory_bytes, fw, d.memory_margin)

    worst = max(devices, key=lambda d: needed(d) / d.memory_capacity_bytes)
    margins = ", ".join(
        f"x{m:.2f} on {', '.join(sorted({d.type for d in devices if d.memory_margin == m}))}"
        for m in sorted({d.memory_margin for d in devices})
    )
    return [
        f"feasibility margin (measured error of predicted peaks, allocator fragmentation; "
        f"docs/cost-models.md section 6): {margins} on the terms other than the framework "
        f"allowance; fullest with it: {worst.id} needs {fmt_bytes(needed(worst))} of "
        f"{fmt_bytes(worst.memory_capacity_bytes)} ({worst.memory_verdict})"
    ]


def edp_iteration(pred: Prediction) -> float:
    """Energy-delay product of one iteration, J*s: the basis ``hetplan plan`` ranks and prints
    (``Metrics.edp``), whatever ``pred.edp_basis`` is."""
    return pred.energy_j_per_iteration * pred.iteration_time_s


def edp_text(pred: Prediction) -> str:
    """``EDP 0.0163 J*s per iteration``, and the epoch's figure when the prediction has one."""
    text = f"EDP {edp_iteration(pred):.4g} J*s per iteration"
    if pred.edp_basis == "epoch":
        text += f" ({pred.edp:.4g} J*s per epoch)"
    return text


def _money(pred: Prediction) -> str:
    if pred.dollars_per_epoch is not None:
        return f"   {fmt_dollars(pred.dollars_per_epoch)}/epoch"
    if pred.dollars_per_iteration is not None:
        return f"   {fmt_dollars(pred.dollars_per_iteration)}/iteration"
    return ""
