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
from typing import Annotated

import typer

from hetplan.cli import (
    cmd_bench,
    cmd_calibrate,
    cmd_cluster,
    cmd_model,
    cmd_plan,
    cmd_predict,
    cmd_profile,
    cmd_store,
    cmd_train,
    cmd_tune,
)
from hetplan.cli.output import silence_stdout
from hetplan.cli.signals import describe, interruptible
from hetplan.errors import HetplanError, Interrupted

app = typer.Typer(
    name="hetplan",
    help="Plan and run distributed training of PyTorch models on heterogeneous devices.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (~0.1 s)

    try:
        return version("hetplan")
    except PackageNotFoundError:  # run from a source tree that was not installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"hetplan {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print hetplan's version and exit.",
        ),
    ] = False,
) -> None:
    """Plan and run distributed training of PyTorch models on heterogeneous devices."""


for _module in (
    cmd_cluster,
    cmd_model,
    cmd_predict,
    cmd_plan,
    cmd_profile,
    cmd_calibrate,
    cmd_store,
    cmd_train,
    cmd_tune,
    cmd_bench,
):
    _module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        with interruptible():
            app(args=argv, standalone_mode=True)
    except HetplanError as err:
        print(f"hetplan: error: {err}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as err:
        print(f"hetplan: {describe(err)}", file=sys.stderr)
        sys.exit(128 + err.signum)
    except SystemExit as done:
        if done.code == 1 and _stdout_closed():
            sys.exit(0)  # the reader stopped early (``| head``): not an error
        if done.code in (0, None):
            _flush_stdout()
        raise


def _stdout_closed() -> bool:
    """True when stdout's reader went away during the command: typer then swaps stdout for
    click's PacifyFlushWrapper and exits 1."""
    if type(sys.stdout).__name__ != "PacifyFlushWrapper":
        return False
    silence_stdout()
    return True


def _flush_stdout() -> None:
    """Flush now, so that a reader gone after the last write is not reported by the
    interpreter's own flush at exit (exit status 120 and a message)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
