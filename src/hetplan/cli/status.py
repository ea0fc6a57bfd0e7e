"""A transient spinner on stderr for the phases of a command that can take seconds, and the
flows' feedback drawn with it (:class:`Terminal`).

Shown only when stderr is a terminal (pipes, CI logs and ``--json`` output stay clean), and
erased when the phase ends, so that stdout carries only the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from hetplan.cli.progress_view import ProgressLine
from hetplan.run.loop.rank_warnings import WarningReader

if TYPE_CHECKING:
    from hetplan.plan.options import Progress as SearchProgress

_stderr = Console(stderr=True, highlight=False)


@contextmanager
def working(text: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """A spinner labelled ``text`` while the block runs (nothing when ``quiet`` or when
    stderr is not a terminal). Yields a function that adds a phase to the label."""
    if quiet or not _stderr.is_terminal:
        yield lambda _phase: None
        return
    with _stderr.status(text, spinner="dots") as status:
        yield lambda phase: status.update(f"{text}: {phase}")


class Terminal:
    """A flow's feedback (:class:`hetplan.usecases.feedback.Feedback`) on stderr: spinners,
    the search's bar, a run's live line; nothing when ``quiet`` (``--json``)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._warned: set[tuple[str, str]] = set()
        """Warnings shown already (once per command, whichever run or rank raised them)."""

    def phase(self, text: str) -> AbstractContextManager[object]:
        return working(text, quiet=self.quiet)

    @contextmanager
    def search(self) -> Iterator[SearchProgress]:
        status = Console(stderr=True, highlight=False)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=status,
            transient=True,
            disable=self.quiet or not status.is_terminal,
        ) as bar:
            task = bar.add_task("searching", total=None)

            def progress(phase: str, done: int, total: int, /, *, best: str = "") -> None:
                text = f"{phase}, best so far {best}" if best else phase
                bar.update(task, description=text, completed=done, total=total or None)

            yield progress

    @contextmanager
    def run(
        self, logs: Path, ranks: int | Sequence[int], steps: int, label: str = "training"
    ) -> Iterator[Callable[[], None]]:
        reader = WarningReader(logs)

        def tick() -> None:
            line.poll()
            self._warn(reader, line.console)  # the live line's console prints above it

        with ProgressLine(logs, ranks, steps, enabled=not self.quiet, label=label) as line:
            try:
                yield tick
            finally:
                self._warn(reader, line.console)  # what the ranks warned since the last tick

    def note(self, text: str) -> None:
        """On stderr, even under ``--json`` (whose stdout is the result)."""
        _stderr.print(text, markup=False, soft_wrap=True, highlight=False)

    def _warn(self, reader: WarningReader, console: Console) -> None:
        """Print each new distinct warning of the ranks, even under ``--json`` (stderr)."""
        for found in reader.read_new():
            if found.key not in self._warned:
                self._warned.add(found.key)
                console.print(found.text(), markup=False, soft_wrap=True, highlight=False)
