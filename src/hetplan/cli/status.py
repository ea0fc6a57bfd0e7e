"""A transient spinner on stderr for the phases of a command that can take seconds.

Shown only when stderr is a terminal (pipes, CI logs and ``--json`` output stay clean), and
erased when the phase ends, so that stdout carries only the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

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
