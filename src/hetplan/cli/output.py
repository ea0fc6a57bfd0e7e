"""Shared printing helpers for the CLI (the library never prints)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console

WIDE = 160
"""Columns when stdout is not a terminal (pipes, CI logs): rich would assume 80."""


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null: later flushes of stdout go nowhere quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader of stdout went away (``hetplan ... | head``): stop quietly, status 0
        (rich's default exits 1)."""
        silence_stdout()
        raise SystemExit(0)


console = _Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else WIDE)


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
