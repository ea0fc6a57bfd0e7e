"""SIGINT and SIGTERM as an exception the command cleans up after.

Without this, SIGTERM killed ``hetplan train`` on the spot: its temporary folders stayed in
/tmp and its step log was never merged; Ctrl-C exited without a word. While
:func:`interruptible` is active, either signal raises :class:`hetplan.errors.Interrupted` in the
main thread: the flow on the way out kills every process of the run
(:mod:`hetplan.run.launch.spawn`), keeps the steps measured so far and names the checkpoint to
resume from; the CLI prints that in one line and exits 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from hetplan.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise(signum: int, _frame: FrameType | None) -> None:
    # A second signal would interrupt the clean-up (killing the run's processes): ignored.
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the block (also where a parent left
    SIGINT ignored, as shells do for background jobs: the user asked for it by name). The
    handlers before are restored afterwards; a no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def describe(err: Interrupted) -> str:
    """``interrupted by SIGINT; <what was kept>``."""
    name = signal.Signals(err.signum).name
    return f"interrupted by {name}" + (f"; {err.message}" if err.message else "")
