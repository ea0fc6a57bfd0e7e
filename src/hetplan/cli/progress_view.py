"""One live line on stderr that follows a run's step logs (see :mod:`hetplan.run.loop.steplog`):

training  step 12/40  loss 0.4123  step 85.00 ms  1204 samples/s  ETA 2.4 s
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from hetplan.run.loop.steplog import (
    Progress,
    StepLogReader,
    StepSummary,
    complete_steps,
    progress_of,
)
from hetplan.units import fmt_seconds

RATE_DIGITS = 3  # significant digits of a samples/s figure below 100


def format_progress(p: Progress) -> str:
    """``step 12/40  loss 0.4123  step 85.00 ms  1204 samples/s  ETA 2.4 s``; the figures
    not known yet (before the first step) are left out."""
    parts = [f"step {p.done}/{p.total}"]
    if p.loss is not None:
        parts.append(f"loss {_fmt_loss(p.loss)}")
    if p.step_s is not None:
        parts.append(f"step {fmt_seconds(p.step_s)}")
    if p.samples_per_s is not None:
        parts.append(f"{_fmt_rate(p.samples_per_s)} samples/s")
    if p.eta_s is not None:
        parts.append(f"ETA {_fmt_eta(p.eta_s)}")
    return "  ".join(parts)


class ProgressLine:
    """A context manager drawing one transient line on stderr while a run goes; :meth:`poll`
    reads what the ranks logged since the last poll and redraws it.

    Does nothing when ``enabled`` is False or stderr is not a terminal. ``console`` replaces
    the stderr console (tests).
    """

    def __init__(
        self,
        directory: Path,
        world_size: int | Sequence[int],
        total_steps: int,
        *,
        enabled: bool = True,
        label: str = "training",
        console: Console | None = None,
    ) -> None:
        self.world_size = world_size
        self.total_steps = total_steps
        self.label = label
        self.console = console if console is not None else Console(stderr=True, highlight=False)
        self.enabled = enabled and self.console.is_terminal
        self.summaries: list[StepSummary] = []
        """The complete steps seen so far, by step."""
        self._reader = StepLogReader(directory)
        self._pending: dict[int, list[dict[str, Any]]] = {}
        self._live: Live | None = None

    @property
    def progress(self) -> Progress:
        return progress_of(self.summaries, self.total_steps)

    def text(self) -> str:
        """The line as it is drawn now."""
        return f"{self.label}  {format_progress(self.progress)}"

    def poll(self) -> None:
        """Take in the records written since the last poll and redraw the line."""
        if not self.enabled:
            return
        new = self._reader.read_new()
        if new:
            for rank, records in new.items():
                self._pending.setdefault(rank, []).extend(records)
            done = complete_steps(self._pending, self.world_size)
            if done:
                finished = {s.step for s in done}
                for rank, records in self._pending.items():
                    self._pending[rank] = [r for r in records if r["step"] not in finished]
                self.summaries = sorted([*self.summaries, *done], key=lambda s: s.step)
        if self._live is not None:
            self._live.update(self._renderable(), refresh=True)

    def __enter__(self) -> ProgressLine:
        if self.enabled:
            self._live = Live(
                self._renderable(),
                console=self.console,
                transient=True,
                auto_refresh=False,  # poll() redraws
                redirect_stdout=False,  # stdout may carry JSON; it must not go to stderr
            )
            self._live.start(refresh=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _renderable(self) -> Text:
        return Text(self.text(), no_wrap=True, overflow="ellipsis")


def _fmt_loss(loss: float) -> str:
    return f"{loss:.3e}" if 0 < abs(loss) < 1e-3 else f"{loss:.4f}"


def _fmt_rate(rate: float) -> str:
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.{RATE_DIGITS}g}"


def _fmt_eta(seconds: float) -> str:
    """``2.4 s`` under a minute, ``m:ss`` / ``h:mm:ss`` above."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
