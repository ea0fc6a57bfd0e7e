"""Calibrations in the profile store: ``<profile dir>/calibrations/<type>__<dtype>.json``.

One file per device type and dtype (a new calibration replaces the old one), and on CPU per
thread count: one taken with ``n > 1`` threads is ``<type>__<dtype>__t<n>.json``, so the
cost model can pick the one a device's thread count matches (:mod:`hetplan.cost.threads`);
one-thread files keep the name they had before. Kept in their own folder so that
:func:`hetplan.profile.store.load_profiles` never reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

from hetplan.cost.calibration import Calibration
from hetplan.errors import InputError
from hetplan.profile.store import _safe, profile_dir
from hetplan.serde import from_data, load_file, to_data, write_json_atomic

CALIBRATION_DIR = "calibrations"


def calibration_path(
    device_type: str, dtype: str, directory: Path | None = None, threads: int = 1
) -> Path:
    """Where the calibration of ``device_type`` in ``dtype`` at ``threads`` CPU threads is
    stored (a GPU's: ``threads`` 1, its host threads do not matter)."""
    tail = f"__t{threads}" if threads > 1 else ""
    name = f"{_safe(device_type)}__{_safe(dtype)}{tail}.json"
    return profile_dir(directory) / CALIBRATION_DIR / name


def save_calibration(cal: Calibration, directory: Path | None = None) -> Path:
    """Store ``cal`` (replacing the device type's calibration in that dtype, and on CPU at
    that thread count)."""
    threads = cal.threads if cal.device == "cpu" else 1
    return write_calibration(cal, calibration_path(cal.device_type, cal.dtype, directory, threads))


def store_calibration(cal: Calibration, out: Path | None) -> Path:
    """``--out x.json`` writes that file; any other ``--out`` (or none) is a store folder."""
    if out is not None and out.suffix == ".json":
        return write_calibration(cal, out)
    return save_calibration(cal, out)


def write_calibration(cal: Calibration, path: Path) -> Path:
    """Write ``cal`` to an explicit file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(cal))
    return path


def load_calibration(path: Path) -> Calibration:
    """One calibration file (InputError naming the file and field on bad content)."""
    return load_file(Calibration, path)


def load_calibrations(directory: Path | None = None) -> list[Calibration]:
    """Every readable calibration in the store, oldest first (a later one wins a lookup)."""
    root = profile_dir(directory) / CALIBRATION_DIR
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            out.append(from_data(Calibration, json.loads(path.read_text()), str(path)))
        except (InputError, ValueError, OSError):
            continue  # a foreign or half-written file must not hide the good ones
    return sorted(out, key=lambda c: c.timestamp)
