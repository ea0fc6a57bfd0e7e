"""Print a schedule as a grid: one row per device, one column per slot (its actions in order).

Like torch.distributed.pipelining's schedule printing, but transposed (rows are devices):

    n0.0 | F0  F1  F2  F3  B0  B1  B2  B3  OPT
    n0.1 |     F0  F1  F2  F3  B0  ...

Without a timeline, each device's actions are left-aligned in order. With ``starts`` (action
start times from a simulation), actions are placed in global time order so that a column holds
actions that start at the same time; idle slots show as blanks (the bubbles).
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.planspec.trace import COMPUTE_KINDS
from hetplan.schedule.types import Action, Schedule


def _shown(act: Action, sends: bool) -> bool:
    return sends or act.kind != "send"


def _label(act: Action, device: str) -> str:
    if act.kind == "send":
        return f"{'S' if act.device == device else 'R'}{act.microbatch}"
    return act.label


def format_grid(
    schedule: Schedule, starts: Sequence[float] | None = None, *, sends: bool = False
) -> str:
    """The schedule as text; ``sends`` adds sends (S) and receives (R) to the rows."""
    rows = schedule.per_device()
    cells: dict[str, list[tuple[int, str]]] = {}
    if starts is None:
        for dev, items in rows.items():
            acts = [(i, a) for i, a in items if _shown(a, sends)]
            cells[dev] = [(col, _label(a, dev)) for col, (_, a) in enumerate(acts)]
    else:
        times = sorted({starts[i] for i, a in enumerate(schedule.actions) if _shown(a, sends)})
        col_of = {t: c for c, t in enumerate(times)}
        for dev, items in rows.items():
            cells[dev] = [(col_of[starts[i]], _label(a, dev)) for i, a in items if _shown(a, sends)]
    width = max((len(lab) for row in cells.values() for _, lab in row), default=1)
    ncols = max((col + 1 for row in cells.values() for col, _ in row), default=0)
    name_w = max((len(d) for d in cells), default=0)
    lines = []
    for dev in schedule.devices:
        slots = [""] * ncols
        for col, lab in cells.get(dev, []):
            # Actions sharing a start time (zero-length ones) share a cell.
            slots[col] = lab if not slots[col] else slots[col] + "+" + lab
        body = " ".join(s.ljust(width) for s in slots).rstrip()
        lines.append(f"{dev.ljust(name_w)} | {body}")
    return "\n".join(lines)


def compute_only(schedule: Schedule, device: str) -> list[Action]:
    """The compute actions of ``device`` in order (what its compute stream runs)."""
    return [a for _, a in schedule.per_device().get(device, []) if a.kind in COMPUTE_KINDS]
