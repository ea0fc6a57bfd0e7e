"""What ``hetplan train`` says about its write-back into the profile store: what it wrote
(device type, micro-batch sizes, runs merged, file) or why it wrote nothing."""

from __future__ import annotations

from typing import Any

from hetplan.run.measurement.writeback_types import WriteBack, Written


def _sizes(sizes: tuple[int, ...]) -> str:
    return ", ".join(str(b) for b in sizes)


def written_line(w: Written) -> str:
    """One written-back file: its device type, sizes, runs, this run's figures and path."""
    runs = ", ".join(f"{r} run{'s' if r > 1 else ''}" for r in w.runs)
    spread = f"p90/p10 {w.spread:.2f}" if w.spread is not None else "spread unknown"
    line = (
        f"profile of {w.device_type} written back with the measured stage times: micro-batch "
        f"{_sizes(w.sizes)} (median of {runs}; this run {w.steps} timed steps, {spread}): "
        f"{w.path}"
    )
    if w.shadowed:
        line += (
            f"; at micro-batch {_sizes(w.shadowed)} the profile of {w.device_type} measured "
            "on purpose still prices it (written-back figures never replace it)"
        )
    return line


def writeback_lines(back: WriteBack | None) -> list[str]:
    """One line per profile written back, one per reason something was not."""
    if back is None:
        return ["profile not written back: --no-save-profile"]
    lines = [written_line(w) for w in back.written]
    return lines + [f"profile not written back: {why}" for why in back.skipped]


def writeback_json(back: WriteBack | None) -> dict[str, Any]:
    if back is None:
        return {"profiles_written": [], "profile_not_written": ["--no-save-profile"]}
    written = [
        {"device_type": w.device_type, "path": str(w.path), "micro_batches": list(w.sizes),
         "runs": list(w.runs), "steps": w.steps, "spread": w.spread,
         "shadowed_by_profile": list(w.shadowed)}
        for w in back.written
    ]  # fmt: skip
    return {"profiles_written": written, "profile_not_written": list(back.skipped)}
