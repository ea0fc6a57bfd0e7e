"""CLI commands (filled in by the issue that owns them)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
