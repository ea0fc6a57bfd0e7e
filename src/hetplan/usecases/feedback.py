"""What a long flow tells its caller while it runs: its slow phases, the search's progress, and
each run's steps.

The flows print nothing, so they take a :class:`Feedback`: the CLI's draws spinners and live
lines on stderr (:class:`hetplan.cli.status.Terminal`); :data:`SILENT` draws nothing (scripts,
tests, ``--json``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from hetplan.plan.options import Progress

Tick = Callable[[], None]
"""Called while a run goes: the caller reads the ranks' step logs and redraws."""


class Feedback(Protocol):
    """How a flow shows that it is working (each method wraps the work it names)."""

    def phase(self, text: str) -> AbstractContextManager[object]:
        """Around a step that may take seconds, named in words (``tracing gpt-tiny``)."""
        ...

    def search(self) -> AbstractContextManager[Progress]:
        """Around the plan search; yields the search's progress callback."""
        ...

    def run(
        self, logs: Path, ranks: int | Sequence[int], steps: int, label: str = "training"
    ) -> AbstractContextManager[Tick]:
        """Around one run whose ranks log ``steps`` steps under ``logs``; yields its tick."""
        ...

    def note(self, text: str) -> None:
        """A line the user should read before the work goes on (``resumed from step 40``)."""
        ...


def _ignore(phase: str, done: int, total: int, /, *, best: str = "") -> None:
    """A search progress callback that shows nothing."""


def _nothing() -> None:
    """A tick that reads nothing."""


class Silent:
    """Feedback that shows nothing."""

    def phase(self, text: str) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def search(self) -> Iterator[Progress]:
        yield _ignore

    @contextlib.contextmanager
    def run(
        self, logs: Path, ranks: int | Sequence[int], steps: int, label: str = "training"
    ) -> Iterator[Tick]:
        yield _nothing

    def note(self, text: str) -> None:
        pass


SILENT: Feedback = Silent()
"""The default of every flow."""
