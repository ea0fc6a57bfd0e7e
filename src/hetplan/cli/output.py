"""Shared printing helpers for the CLI (the library never prints)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
