"""What the profile store holds, per file, with provenance; and removing entries from it
(``hetplan store list`` / ``hetplan store remove``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hetplan.errors import InputError
from hetplan.profile.provenance import provenance_of, source_of
from hetplan.profile.store import profile_dir, stored_profiles
from hetplan.profile.types import SOURCES, Profile, Provenance

ALL = "all"
SOURCE_CHOICES = (*SOURCES, ALL)


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One profile file of the store."""

    path: Path
    profile: Profile
    source: str
    sizes: tuple[tuple[int, Provenance], ...]
    """Each micro-batch size with its provenance."""


def check_source(source: str) -> str:
    """``source`` if it is one of :data:`SOURCE_CHOICES` (InputError naming it otherwise)."""
    if source not in SOURCE_CHOICES:
        raise InputError(f"--source {source!r}: expected one of {', '.join(SOURCE_CHOICES)}")
    return source


def entries(
    directory: Path | None = None,
    *,
    device_type: str | None = None,
    model: str | None = None,
    source: str = ALL,
) -> list[Entry]:
    """The store's profiles matching the filters (None and ``all``: any), by file name."""
    check_source(source)
    out = []
    for path, p in stored_profiles(directory):
        src = source_of(p)
        if device_type not in (None, p.device_type) or model not in (None, p.model):
            continue
        if source not in (ALL, src):
            continue
        sizes = tuple((b.batch, provenance_of(p, b)) for b in p.batches)
        out.append(Entry(path=path, profile=p, source=src, sizes=sizes))
    return out


def remove(
    device_type: str, model: str, source: str = ALL, directory: Path | None = None
) -> list[Entry]:
    """Delete the profile files of ``model`` on ``device_type`` from ``source``; the removed
    entries. InputError, deleting nothing, when none matches or the store is read-only."""
    found = entries(directory, device_type=device_type, model=model, source=source)
    root = profile_dir(directory)
    if not found:
        what = "" if source == ALL else f" {source}"
        raise InputError(
            f"no{what} profile of model {model!r} on device type {device_type!r} in {root}; "
            "`hetplan store list` shows what it holds"
        )
    if not os.access(root, os.W_OK):
        raise InputError(f"{root}: cannot remove profiles (the folder is not writable)")
    for e in found:
        e.path.unlink(missing_ok=True)
    return found
