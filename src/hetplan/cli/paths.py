"""Output paths checked before any work starts, without creating anything.

A command that would measure for minutes and then fail to write its result loses the result;
so every ``--out``-like option is checked first: the nearest existing ancestor must be a
writable folder, and the path itself must not be a folder (for a file) or a file (for a
folder). Folders are created only when the result is written. Permission bits do not say
everything (root may "write" to ``/proc``, a read-only mount grants ``W_OK``), so the folder
is also probed with a temporary file, removed at once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from hetplan.errors import InputError

OtherClusterOpt = Annotated[
    bool,
    typer.Option(
        "--other-cluster",
        help="Use a plan made for another cluster (its device ids, types or nodes differ).",
    ),
]


def _existing_ancestor(path: Path) -> Path:
    """The deepest ancestor of ``path`` that exists (``.`` for relative paths at worst)."""
    for parent in path.absolute().parents:
        if parent.exists():
            return parent
    return Path("/")


def _check_ancestor(path: Path, option: str) -> None:
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise InputError(f"{option} {path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: folder {base} is not writable")
    _probe(base, path, option)


def _probe(folder: Path, path: Path, option: str) -> None:
    """Create and remove a temporary file in ``folder``: InputError with the reason if the
    system refuses (a pseudo-filesystem, a read-only mount, a full disk's quota)."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".hetplan-probe-"):
            pass
    except OSError as err:
        raise InputError(
            f"{option} {path}: cannot write in {folder} ({err.strerror or err})"
        ) from None


def check_output(path: Path, option: str) -> None:
    """InputError naming ``option`` unless ``path`` can be written as a file."""
    if path.is_dir():
        raise InputError(f"{option} {path}: is a folder, expected a file path")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InputError(f"{option} {path}: file is not writable")
        return
    _check_ancestor(path, option)


def check_output_dir(path: Path, option: str) -> None:
    """InputError naming ``option`` unless ``path`` is (or can be made) a writable folder."""
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{option} {path}: is a file, expected a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(f"{option} {path}: folder is not writable")
        return
    _check_ancestor(path, option)


def check_input_dir(path: Path | None, option: str) -> None:
    """InputError naming ``option`` when ``path`` exists but is not a folder (a folder that
    does not exist yet reads as empty: a new profile store)."""
    if path is not None and path.exists() and not path.is_dir():
        raise InputError(f"{option} {path}: is a file, expected a folder")
