"""Shared printing helpers for the CLI (the library never prints)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

WIDE = 160
"""Columns when stdout is not a terminal (pipes, CI logs): rich would assume 80."""

console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else WIDE)


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
