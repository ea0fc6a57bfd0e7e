"""``hetplan calibrate``: measure a device's achieved rate per operation class, over sizes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from hetplan.cli.cmd_profile import _fail, check_store
from hetplan.cli.output import console, print_json
from hetplan.cli.status import working
from hetplan.errors import HetplanError, InputError
from hetplan.graph.types import OP_CLASSES
from hetplan.planspec.dtypes import TRAINING_DTYPES
from hetplan.serde import to_data

# torch loads inside the command: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.cost.calibration import Calibration

CLASSES = OP_CLASSES


def parse_classes(text: str | None) -> tuple[str, ...]:
    """``"matmul,conv"`` -> the classes, checked; None -> every class."""
    if text is None:
        return CLASSES
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in names if c not in CLASSES]
    if bad or not names:
        raise InputError(
            f"--classes {text!r}: expected a comma-separated subset of {', '.join(CLASSES)}"
        )
    return names


def calibration_table(cal: Calibration, peak: float | None, bandwidth: float | None) -> Table:
    """Per class and pass: the smallest and largest probe's work and achieved rate."""
    title = (
        f"{cal.device_type} ({cal.device_name}), {cal.dtype}, {cal.threads} thread(s): "
        "achieved rate per kernel at the smallest and largest probe"
    )
    table = Table(title=title)
    for i, col in enumerate(
        ("class", "pass", "points", "small work", "rate", "large work", "rate", "of peak")
    ):
        table.add_column(col, justify="left" if i < 2 else "right")
    for c in cal.curves:
        lo, hi = c.points[0], c.points[-1]
        unit = "B" if c.op_class == "memory" else "FLOP"
        ref = bandwidth if c.op_class == "memory" else peak
        best = c.best_rate()
        table.add_row(
            c.op_class,
            "bwd" if c.backward else "fwd",
            str(len(c.points)),
            f"{lo.work:.3g} {unit}",
            f"{lo.work / lo.seconds / 1e9:.3g} G{unit}/s",
            f"{hi.work:.3g} {unit}",
            f"{hi.work / hi.seconds / 1e9:.3g} G{unit}/s",
            f"{best / ref:.0%}" if ref else "-",
        )
    return table


def calibrate(
    device: Annotated[str, typer.Option(help="cpu or cuda:N.")] = "cpu",
    device_type: Annotated[
        str | None,
        typer.Option("--type", help="Device type to file it under (default: cpu / GPU name)."),
    ] = None,
    dtype: Annotated[str, typer.Option(help="fp32, bf16 or fp16.")] = "fp32",
    classes: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated subset of {', '.join(CLASSES)} (default: all)."),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1, help="Intra-op threads (CPU default 1: one core; N prices cpus: of N cores)."
        ),
    ] = None,
    min_time: Annotated[
        float, typer.Option(min=0.0, help="Seconds to keep timing each probe size and pass.")
    ] = 0.05,
    out: Annotated[
        Path | None,
        typer.Option(help="FILE.json, or a store directory (default $HETPLAN_PROFILE_DIR)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Measure the achieved time per kernel of each operation class (matrix multiply,
    convolution, grouped convolution, attention, memory-bound elementwise) over a range of
    sizes, and store it with the profiles: the analytical model then prices every layer of any
    model on this device type from its kernels' classes and sizes."""
    from hetplan.cluster.catalog import DEVICE_CATALOG
    from hetplan.profile.calib_store import store_calibration
    from hetplan.profile.calibrate import Settings
    from hetplan.profile.calibrate import calibrate as measure
    from hetplan.profile.model import device_type_for, torch_device
    from hetplan.profile.timing import thread_scope

    check_store(out)
    try:
        if dtype not in TRAINING_DTYPES:
            names = ", ".join(TRAINING_DTYPES)
            raise InputError(f"--dtype {dtype!r}: expected one of {names}")
        wanted = parse_classes(classes)
        dev = torch_device(device)
        kind = device_type_for(device_type, dev)
        if threads is None and dev.type == "cpu":
            threads = 1  # the catalog's ``cpu`` type is one core
        settings = Settings(min_time_s=min_time)
        with (
            thread_scope(threads, None),
            working(f"calibrating {device}", quiet=json_out) as status,
        ):
            cal = measure(kind, dev, dtype, wanted, settings, on_class=status)
        path = store_calibration(cal, out)
    except HetplanError as err:
        raise _fail(err) from None
    except OSError as err:
        raise _fail(InputError(str(err))) from None
    if json_out:
        print_json({"path": str(path), "calibration": to_data(cal)})
        return
    known = DEVICE_CATALOG.get(kind)
    peak = known.flops(dtype) if known is not None else None
    bandwidth = known.memory_bandwidth if known is not None else None
    console.print(calibration_table(cal, peak, bandwidth))
    at = f" on {cal.threads} thread(s)" if cal.device == "cpu" else ""
    console.print(f"calibration of {kind} in {dtype}{at} stored in {path}")
    timing = "back to back on the stream" if cal.timing == "stream" else "one call at a time"
    issue = f"; host issue cost {cal.issue_s * 1e6:.1f} us per kernel" if cal.issue_s else ""
    console.print(f"probes timed {timing}{issue}")
    if dtype == "bf16" and known is not None and known.flops("fp16") == known.flops("bf16"):
        console.print(f"fp16 is priced on these curves too ({kind}: same fp16 and bf16 peak)")


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to ``app``."""
    app.command("calibrate")(calibrate)
