"""The ``hetplan`` command: a thin layer that parses, calls the library, and prints.

Every subcommand lives in its own module with a ``register(app)`` function. Library errors
(:class:`hetplan.errors.HetplanError`) become one line on stderr and exit status 2.

Every start imports every command module (typer reads their signatures to register them), so
those modules import torch and other heavy packages inside the commands that use them:
``hetplan --help`` and ``hetplan cluster ...`` start in well under a second
(``tests/cli/test_cli_cluster.py`` checks that they never load torch).
"""

from __future__ import annotations

import sys

import typer

from hetplan.cli import (
    cmd_bench,
    cmd_cluster,
    cmd_model,
    cmd_plan,
    cmd_predict,
    cmd_profile,
    cmd_run,
    cmd_tune,
)
from hetplan.errors import HetplanError

app = typer.Typer(
    name="hetplan",
    help="Plan and run distributed training of PyTorch models on heterogeneous devices.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (
    cmd_cluster,
    cmd_model,
    cmd_predict,
    cmd_plan,
    cmd_profile,
    cmd_run,
    cmd_tune,
    cmd_bench,
):
    _module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        app(args=argv, standalone_mode=True)
    except HetplanError as err:
        print(f"hetplan: error: {err}", file=sys.stderr)
        sys.exit(2)
