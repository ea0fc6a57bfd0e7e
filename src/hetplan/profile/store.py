"""The profile store: JSON files keyed by device type, model, input shape, batch set and dtype
(and the tensor-parallel degree when it is above 1, and ``written-back`` for what ``hetplan
train`` wrote: it never shares a file with a profile measured on purpose).

Default directory ``~/.cache/hetplan/profiles``; ``HETPLAN_PROFILE_DIR`` overrides it, and an
explicit directory argument overrides both.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from hetplan.errors import InputError
from hetplan.profile.provenance import WRITTEN_BACK, is_deliberate
from hetplan.profile.types import BatchTiming, LayerFit, LayerTiming, Profile
from hetplan.serde import from_data, load_file, to_data, write_json_atomic

__all__ = [
    "BatchTiming",
    "LayerFit",
    "LayerTiming",
    "Profile",
    "find_profile",
    "load_profile",
    "load_profiles",
    "profile_dir",
    "profile_key",
    "profile_path",
    "save_profile",
    "stored_profiles",
]

PROFILE_DIR_ENV = "HETPLAN_PROFILE_DIR"
DEFAULT_PROFILE_DIR = Path("~/.cache/hetplan/profiles")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def profile_dir(directory: Path | None = None) -> Path:
    """Where profiles live: ``directory``, else ``$HETPLAN_PROFILE_DIR``, else the default."""
    if directory is not None:
        return directory
    env = os.environ.get(PROFILE_DIR_ENV)
    return Path(env) if env else DEFAULT_PROFILE_DIR.expanduser()


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "x"


def profile_key(
    device_type: str,
    model: str,
    input_shape: Sequence[int],
    batch_sizes: Sequence[int],
    dtype: str,
    tp: int = 1,
    source: str | None = None,
) -> str:
    """File stem naming one profile, e.g. ``cpu__resnet18__3x32x32__b1-16-32__fp32``; a
    tensor-parallel profile adds ``__tp2`` (tp = 1 keeps the keys of older stores), a written-
    back one ``__written-back``."""
    shape = "x".join(str(d) for d in input_shape) or "scalar"
    batches = "-".join(str(b) for b in sorted(set(batch_sizes)))
    parts = (device_type, model, shape, f"b{batches}", dtype) + ((f"tp{tp}",) if tp > 1 else ())
    parts += (WRITTEN_BACK,) if source == WRITTEN_BACK else ()
    return "__".join(_safe(p) for p in parts)


def key_of(profile: Profile) -> str:
    return profile_key(
        profile.device_type,
        profile.model,
        profile.input_shape,
        profile.batch_sizes,
        profile.dtype,
        profile.tp,
        profile.source,
    )


def profile_path(profile: Profile, directory: Path | None = None) -> Path:
    """The file :func:`save_profile` writes ``profile`` to."""
    return profile_dir(directory) / f"{key_of(profile)}.json"


def save_profile(profile: Profile, directory: Path | None = None) -> Path:
    """Write ``profile`` into the store (replacing one with the same key); return its path."""
    path = profile_path(profile, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(profile))
    return path


def write_profile(profile: Profile, path: Path) -> Path:
    """Write ``profile`` to an explicit file (``--out FILE``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(profile))
    return path


def load_profile(path: Path) -> Profile:
    """Read one profile file (InputError naming the file and field on bad content)."""
    return load_file(Profile, path)


def stored_profiles(directory: Path | None = None) -> list[tuple[Path, Profile]]:
    """Every readable profile in the store and its file, sorted by file name; unreadable files
    are skipped."""
    root = profile_dir(directory)
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append((path, from_data(Profile, json.loads(path.read_text()), str(path))))
        except (InputError, ValueError, OSError):
            continue  # a foreign or half-written file must not hide the good ones
    return out


def load_profiles(directory: Path | None = None) -> list[Profile]:
    """Every readable profile in the store, sorted by file name; unreadable files are skipped."""
    return [p for _, p in stored_profiles(directory)]


def find_profile(
    device_type: str,
    model: str,
    input_shape: Sequence[int],
    dtype: str,
    *,
    batch_sizes: Sequence[int] | None = None,
    directory: Path | None = None,
    tp: int = 1,
    written_back: bool = False,
) -> Profile | None:
    """The stored profile matching the key; with no ``batch_sizes``, the one covering the
    widest batch range (ties: the newest). Profiles written back by ``hetplan train`` only
    with ``written_back``."""
    shape = tuple(input_shape)
    matches = [
        p
        for p in load_profiles(directory)
        if (written_back or is_deliberate(p))
        and p.device_type == device_type
        and p.model == model
        and tuple(p.input_shape) == shape
        and p.dtype == dtype
        and p.tp == tp
        and (batch_sizes is None or sorted(set(p.batch_sizes)) == sorted(set(batch_sizes)))
    ]
    if not matches:
        return None
    return max(matches, key=lambda p: (max(p.batch_sizes), len(p.batch_sizes), p.timestamp))
