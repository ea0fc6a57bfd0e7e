"""An optional on-disk cache of extracted zoo graphs (JSON, one file per graph).

Extraction traces a training step on the meta device: a second or more for a large model,
and torch's first meta-device op imports ``torch._dynamo`` (about 1 s). A cached graph loads in
milliseconds. Only zoo models are cached (a user's file may change without notice); the key
holds the model name, dataset, depth, batch, dtype, the hetplan and torch versions and a hash
of this package's source, so any change to the extractor or the zoo misses.

Directory: ``$HETPLAN_CACHE_DIR/graphs`` (the variable names hetplan's cache root) or
``~/.cache/hetplan/graphs``; ``HETPLAN_NO_CACHE=1`` turns the cache off. The cache is best
effort: a file that cannot be read, parsed or written is a miss, never an error.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import hetplan
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph

CACHE_DIR_ENV = "HETPLAN_CACHE_DIR"
NO_CACHE_ENV = "HETPLAN_NO_CACHE"
DEFAULT_ROOT = Path("~/.cache/hetplan")


def cache_dir() -> Path | None:
    """Where graphs are cached, or None when ``HETPLAN_NO_CACHE=1``."""
    if os.environ.get(NO_CACHE_ENV, "") == "1":
        return None
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_ROOT).expanduser() / "graphs"


@functools.cache
def source_hash() -> str:
    """Hash of the graph package's Python source (extractor and zoo)."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(name: str, dataset: str | None, depth: int | None, batch: int, dtype: str) -> str:
    import torch  # noqa: PLC0415 (this module stays torch-free for `hetplan models`)

    parts = {
        "name": name,
        "dataset": dataset,
        "depth": depth,
        "batch": batch,
        "dtype": dtype,
        "hetplan": hetplan.__version__,
        "torch": torch.__version__,
        "source": source_hash(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def load(key: str) -> ModelGraph | None:
    """The cached graph for ``key``; None if caching is off or there is none usable."""
    folder = cache_dir()
    path = folder / f"{key}.json" if folder is not None else None
    if path is None or not path.is_file():
        return None
    # pydantic costs ~0.25 s to import: only when there is a file to validate
    from hetplan.serde import from_data  # noqa: PLC0415

    try:
        return from_data(ModelGraph, json.loads(path.read_text()), str(path))
    except (OSError, ValueError, InputError):  # unreadable or stale: a miss
        return None


def store(key: str, graph: ModelGraph) -> None:
    """Cache ``graph`` under ``key`` (nothing if caching is off or the disk refuses).

    Written to a unique temporary file and renamed, so concurrent writers never leave a
    half-written file."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{key}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(dataclasses.asdict(graph), f)
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
