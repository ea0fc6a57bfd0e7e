"""Per-layer costs measured by other tools: a CSV or JSON file of rows -> :class:`Profile` s.

One row per layer, device type, dtype, micro-batch size and tensor-parallel degree (the
format is in docs/profiling.md, "Importing per-layer costs"). Every (device type, dtype, tp)
group becomes one profile with a batch at each micro-batch size and the usual per-layer fits.
The whole file is checked before any profile is built; the first problem is one
:class:`InputError` naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.profile.fit import LinearFit, Stats, fit_linear
from hetplan.profile.provenance import IMPORTED
from hetplan.profile.types import BatchTiming, LayerFit, LayerTiming, Profile, Provenance, StepFit

REQUIRED = ("layer", "device_type", "dtype", "micro_batch", "fwd_s", "bwd_s")
OPTIONAL = ("tp", "fwd_peak_bytes", "bwd_peak_bytes")
COLUMNS = REQUIRED + OPTIONAL
DTYPE_NAMES = ("fp32", "bf16", "fp16")
SHOWN_LAYERS = 5  # layer names listed in an "unknown layer" message

RawRow = tuple[str, dict[str, Any]]
"""Where a row is (``row 3 (line 4)``) and its cells by column."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One checked row of an import file."""

    where: str
    layer: str
    device_type: str
    dtype: str
    micro_batch: int
    tp: int
    fwd_s: float
    bwd_s: float
    fwd_peak_bytes: int | None
    bwd_peak_bytes: int | None

    @property
    def group(self) -> tuple[str, str, int]:
        """The profile the row belongs to: (device type, dtype, tp)."""
        return (self.device_type, self.dtype, self.tp)

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        return (self.layer, self.device_type, self.dtype, self.micro_batch, self.tp)


def exact(seconds: float) -> Stats:
    """One value as a spread-less summary (a single figure, no repeated samples)."""
    return Stats(median_s=seconds, p10_s=seconds, p90_s=seconds)


ZERO = exact(0.0)


ONE_SIZE = "one micro-batch size"


def one_size_note(batches: Sequence[BatchTiming]) -> list[str]:
    """The note of a profile of one size (it goes when sizes are added)."""
    if len(batches) != 1:
        return []
    b = batches[0].batch
    return [
        f"{ONE_SIZE} ({b}): prices micro-batch {b} only; other sizes are priced as on an "
        "unmeasured device type (one point cannot split fixed from per-sample cost)"
    ]


def fit_batches(batches: Sequence[BatchTiming]) -> tuple[tuple[LayerFit, ...], StepFit]:
    """Per-layer fits and the step fit over ``batches`` (:func:`fit_linear`: with one size
    the fit is flat, and :func:`hetplan.profile.measured.prices` uses it at that size only)."""
    sizes = [float(b.batch) for b in batches]

    def fit(pick: Callable[[BatchTiming], Stats]) -> LinearFit:
        return fit_linear(sizes, [pick(b).median_s for b in batches])

    def layer(i: int) -> LayerFit:
        return LayerFit(
            name=batches[0].layers[i].name,
            fwd=fit(lambda b: b.layers[i].fwd),
            bwd=fit(lambda b: b.layers[i].bwd),
        )

    step = StepFit(
        loss=LayerFit(name="loss", fwd=fit(lambda b: b.loss_fwd), bwd=fit(lambda b: b.loss_bwd)),
        optimizer=fit(lambda b: b.optimizer),
        other=fit(lambda b: b.other),
    )
    return tuple(layer(i) for i in range(len(batches[0].layers))), step


# -- reading -------------------------------------------------------------------------------


def read_raw(path: Path) -> list[RawRow]:
    """The rows of a ``.csv`` (header row) or ``.json`` (list of row objects) file."""
    if path.suffix.lower() not in (".csv", ".json"):
        raise InputError(f"{path}: expected a .csv or .json file of per-layer rows")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read ({err})") from None
    text = text.removeprefix("\ufeff")  # the byte-order mark spreadsheets write
    rows = _read_csv(path, text) if path.suffix.lower() == ".csv" else _read_json(path, text)
    if not rows:
        raise InputError(f"{path}: no rows; expected one row per layer (columns {_cols()})")
    return rows


def _cols() -> str:
    return ", ".join(REQUIRED) + ", optional " + ", ".join(OPTIONAL)


def _check_columns(path: Path, where: str, names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise InputError(f"{path}: {where}: unknown column {unknown[0]!r}; expected {_cols()}")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InputError(f"{path}: {where}: missing column {missing[0]!r}; expected {_cols()}")


def _read_csv(path: Path, text: str) -> list[RawRow]:
    reader = csv.DictReader(io.StringIO(text), restkey="\0extra")
    header = [h.strip() for h in reader.fieldnames or []]
    if not header:
        raise InputError(f"{path}: empty file; expected a header row ({_cols()})")
    if len(set(header)) < len(header):
        twice = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{path}: header: column {twice!r} appears twice")
    _check_columns(path, "header", header)
    reader.fieldnames = header
    out = []
    for n, cells in enumerate(reader, 1):
        where = f"row {n} (line {reader.line_num})"
        if "\0extra" in cells:
            raise InputError(f"{path}: {where}: more cells than the header's {len(header)}")
        out.append((where, dict(cells)))
    return out


def _read_json(path: Path, text: str) -> list[RawRow]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of row objects ({_cols()})")
    out = []
    for n, item in enumerate(data, 1):
        where = f"row {n}"
        if not isinstance(item, dict):
            raise InputError(f"{path}: {where}: expected an object with columns {_cols()}")
        _check_columns(path, where, list(item))
        out.append((where, item))
    return out


# -- checking cells ------------------------------------------------------------------------


class _Cells:
    """Typed access to one raw row's cells; errors name file, row and column."""

    def __init__(self, path: Path, raw: RawRow) -> None:
        self.path, (self.where, self.cells) = path, raw

    def bad(self, col: str, problem: str) -> InputError:
        return InputError(f"{self.path}: {self.where}, column {col}: {problem}")

    def get(self, col: str) -> Any:
        v = self.cells.get(col)
        if isinstance(v, str):
            v = v.strip()
        if v is None or v == "":
            if col in REQUIRED:
                raise self.bad(col, "empty; a value is required")
            return None
        return v

    def text(self, col: str) -> str:
        v = self.get(col)
        if not isinstance(v, str):
            raise self.bad(col, f"{v!r} is not text")
        return v

    def count(self, col: str, low: int) -> int | None:
        v = self.get(col)
        if v is None:
            return None
        if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.bad(col, f"{v!r} is not an integer; expected an integer >= {low}")
        if v < low:
            raise self.bad(col, f"{v} is below {low}; expected an integer >= {low}")
        return v

    def seconds(self, col: str) -> float:
        v = self.get(col)
        try:
            x = float(v) if not isinstance(v, bool) and isinstance(v, int | float | str) else None
        except ValueError:
            x = None
        if x is None or not math.isfinite(x) or x < 0:
            raise self.bad(col, f"{v!r}: expected a finite number of seconds >= 0")
        return x


def parse_row(path: Path, raw: RawRow) -> Row:
    """One row, checked column by column."""
    c = _Cells(path, raw)
    dtype = c.text("dtype")
    if dtype not in DTYPE_NAMES:
        raise c.bad("dtype", f"{dtype!r}; expected one of {', '.join(DTYPE_NAMES)}")
    batch = c.count("micro_batch", 1)
    assert batch is not None  # required: get() raised on an empty cell
    return Row(
        where=c.where,
        layer=c.text("layer"),
        device_type=c.text("device_type"),
        dtype=dtype,
        micro_batch=batch,
        tp=c.count("tp", 1) or 1,
        fwd_s=c.seconds("fwd_s"),
        bwd_s=c.seconds("bwd_s"),
        fwd_peak_bytes=c.count("fwd_peak_bytes", 0),
        bwd_peak_bytes=c.count("bwd_peak_bytes", 0),
    )


def read_rows(path: Path) -> list[Row]:
    """Every row of ``path``, checked (no model needed yet)."""
    return [parse_row(path, raw) for raw in read_raw(path)]


# -- checking against the model ------------------------------------------------------------


def _check_layers(path: Path, rows: Sequence[Row], graph: ModelGraph) -> None:
    names = [x.name for x in graph.layers]
    known = set(names)
    for r in rows:
        if r.layer in known:
            continue
        close = difflib.get_close_matches(r.layer, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        shown = ", ".join(names[:SHOWN_LAYERS]) + (", ..." if len(names) > SHOWN_LAYERS else "")
        raise InputError(
            f"{path}: {r.where}, column layer: {r.layer!r} is not a layer of {graph.name} "
            f"({hint}its {len(names)} layers: {shown}; `hetplan inspect` lists them)"
        )


def _check_duplicates(path: Path, rows: Sequence[Row]) -> None:
    seen: dict[tuple[str, str, str, int, int], Row] = {}
    for r in rows:
        first = seen.setdefault(r.key, r)
        if first is not r:
            raise InputError(
                f"{path}: {r.where}, column layer: duplicate of {first.where} (layer {r.layer}, "
                f"device_type {r.device_type}, dtype {r.dtype}, micro_batch {r.micro_batch}, "
                f"tp {r.tp})"
            )


Groups = dict[tuple[str, str, int], dict[int, dict[str, Row]]]


def group_rows(path: Path, rows: Sequence[Row], graph: ModelGraph) -> Groups:
    """Rows by (device type, dtype, tp) and micro-batch size; every group complete."""
    _check_layers(path, rows, graph)
    _check_duplicates(path, rows)
    groups: Groups = {}
    for r in rows:
        groups.setdefault(r.group, {}).setdefault(r.micro_batch, {})[r.layer] = r
    names = [x.name for x in graph.layers]
    for (kind, dtype, tp), by_batch in sorted(groups.items()):
        for b, layers in sorted(by_batch.items()):
            missing = [n for n in names if n not in layers]
            if missing:
                raise InputError(
                    f"{path}: device_type {kind}, dtype {dtype}, micro_batch {b}, tp {tp}: "
                    f"missing layers {', '.join(missing)} (the rows give {len(layers)} of "
                    f"{graph.name}'s {len(names)} layers)"
                )
    return groups


# -- building profiles ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ImportSource:
    """What the file does not say: the model it measured and where it came from."""

    path: Path
    graph: ModelGraph
    dataset: str | None


def _batch(b: int, layers: dict[str, Row], graph: ModelGraph, when: str) -> BatchTiming:
    timings = tuple(
        LayerTiming(
            name=x.name,
            fwd=exact(layers[x.name].fwd_s),
            bwd=exact(layers[x.name].bwd_s),
            fwd_peak_bytes=layers[x.name].fwd_peak_bytes,
            bwd_peak_bytes=layers[x.name].bwd_peak_bytes,
        )
        for x in graph.layers
    )
    total = sum(t.fwd.median_s + t.bwd.median_s for t in timings)
    return BatchTiming(
        batch=b, layers=timings, step=exact(total), other=ZERO, loss_fwd=ZERO, loss_bwd=ZERO,
        optimizer=ZERO, provenance=Provenance(when=when, steps=0, spread=None),
    )  # fmt: skip


def _notes(src: ImportSource, tp: int, batches: Sequence[BatchTiming]) -> tuple[str, ...]:
    notes = [
        f"imported from {src.path.name}: per-layer times only; threads, warm-up and steps unknown",
        "loss, optimizer step and other step time not in the file: zero (the loss counts as "
        "given in the layers' times; predict prices the optimizer step analytically)",
        *one_size_note(batches),
    ]
    if tp > 1:
        notes.append(
            f"tp {tp}: one rank's times in a {tp}-device tensor-parallel group; not used to "
            "price single devices"
        )
    return tuple(notes)


def build_profile(
    src: ImportSource, group: tuple[str, str, int], by_batch: dict[int, dict[str, Row]]
) -> Profile:
    """The profile of one (device type, dtype, tp) group."""
    kind, dtype, tp = group
    when = datetime.now(UTC).isoformat(timespec="seconds")
    batches = tuple(_batch(b, by_batch[b], src.graph, when) for b in sorted(by_batch))
    fits, step_fit = fit_batches(batches)
    return Profile(
        device_type=kind,
        device_name=f"imported from {src.path.name}",
        device="imported",
        model=src.graph.name,
        dataset=src.dataset,
        input_shape=tuple(src.graph.input_shape),
        dtype=dtype,
        tp=tp,
        threads=0,
        cpus=None,
        warmup=0,
        steps=0,
        optimizer="none",  # no optimizer step was timed: predict prices it analytically
        batch_sizes=tuple(b.batch for b in batches),
        batches=batches,
        fits=fits,
        step_fit=step_fit,
        timestamp=when,
        torch_version="unknown",
        notes=_notes(src, tp, batches),
        source=IMPORTED,
    )


def profiles_from_rows(src: ImportSource, rows: Sequence[Row]) -> list[Profile]:
    """One profile per (device type, dtype, tp) group of ``rows``, in that order."""
    groups = group_rows(src.path, rows, src.graph)
    return [build_profile(src, g, groups[g]) for g in sorted(groups)]


def import_file(
    path: Path, model: str, *, dataset: str | None = None, depth: int | None = None
) -> list[Profile]:
    """Read and check ``path``, trace ``model`` for its layers, and build the profiles."""
    from hetplan.graph.extract import build_graph  # noqa: PLC0415 (torch: only when tracing)
    from hetplan.graph.resolve import resolve_model  # noqa: PLC0415

    rows = read_rows(path)  # file errors first: no tracing for a malformed file
    built = resolve_model(model, dataset)
    graph = build_graph(model, dataset, depth)
    return profiles_from_rows(ImportSource(path=path, graph=graph, dataset=built.dataset), rows)
