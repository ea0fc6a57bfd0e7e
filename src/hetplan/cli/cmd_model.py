"""``hetplan models`` and ``hetplan inspect``: the zoo and per-layer model figures."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.cli.status import working
from hetplan.errors import HetplanError
from hetplan.units import BYTES_NOTE, fmt_bytes

# The model zoo and tracer (torch) load inside the commands: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.graph.types import ModelGraph

WIDE = 120
"""Table width in characters when output is not a terminal (keeps rows whole when piped)."""


def _wide() -> Console:
    """The shared console on a terminal (rich fits the table to it), a wide one otherwise."""
    if console.is_terminal or console.width >= WIDE:
        return console
    return Console(width=WIDE, highlight=False, soft_wrap=True)


def _fail(err: HetplanError) -> typer.Exit:
    print(f"hetplan: error: {err}", file=sys.stderr)
    return typer.Exit(2)


def models(json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the zoo models: name, family, parameters, default dataset and input shape."""
    from hetplan.graph.catalog import list_models

    rows = list_models()
    if json_out:
        print_json([dataclasses.asdict(r) for r in rows])
        return
    table = Table(title="hetplan model zoo")
    for col in ("name", "family", "params", "dataset", "input", "description"):
        table.add_column(col, justify="right" if col == "params" else "left")
    for r in rows:
        shape = "x".join(map(str, r.input_shape)) + ("" if r.dataset else f" {r.input_dtype}")
        table.add_row(
            r.name, r.family, f"{r.params / 1e6:.2f}M", r.dataset or "-", shape, r.description
        )
    _wide().print(table)
    console.print(
        "Datasets: mnist, cifar10, imagenet, highres. Transformer options: "
        "NAME:layers=,hidden=,heads=,seq=,vocab= (e.g. gpt:layers=96,hidden=1024,heads=16,seq=512)"
    )


def inspect_report(graph: ModelGraph, dataset: str | None, batch: int) -> dict[str, Any]:
    """The ``inspect --json`` object: figures for ``batch`` samples (parameters do not scale)."""
    cuts = [*graph.cut_bytes, 0]
    layers = [
        {
            "name": layer.name,
            "fwd_flops": layer.fwd_flops * batch,
            "bwd_flops": layer.bwd_flops * batch,
            "params": layer.params,
            "param_bytes": layer.param_bytes,
            "out_bytes": layer.out_bytes * batch,
            "saved_bytes": layer.saved_bytes * batch,
            "cut_bytes": cut * batch,
            "fwd_io_bytes": layer.fwd_io_bytes * batch,
            "bwd_io_bytes": layer.bwd_io_bytes * batch,
            "fwd_kernels": layer.fwd_kernels,
            "bwd_kernels": layer.bwd_kernels,
        }
        for layer, cut in zip(graph.layers, cuts, strict=True)
    ]
    return {
        "model": graph.name,
        "dataset": dataset,
        "batch": batch,
        "dtype": graph.dtype,
        "depth": graph.depth,
        "input_shape": list(graph.input_shape),
        "total_params": graph.total_params,
        "total_param_bytes": graph.total_param_bytes,
        "total_fwd_flops": graph.total_fwd_flops * batch,
        "total_bwd_flops": sum(layer.bwd_flops for layer in graph.layers) * batch,
        "layers": layers,
        "notes": list(graph.notes),
    }


def _gflop(flops: float) -> str:
    g = flops / 1e9
    return f"{g:,.3f}" if g >= 1e-3 or g == 0 else f"{g:.2e}"


def _table(report: dict[str, Any]) -> Table:
    ds = f" / {report['dataset']}" if report["dataset"] else ""
    table = Table(
        title=f"{report['model']}{ds}, batch {report['batch']}, {report['dtype']}",
        caption=f"out, saved, cut after: bytes for the batch ({BYTES_NOTE})",
    )
    cols = ("layer", "fwd GFLOP", "bwd GFLOP", "params", "out", "saved", "cut after")
    for i, col in enumerate(cols):
        table.add_column(col, justify="left" if i == 0 else "right")
    for r in report["layers"]:
        table.add_row(
            r["name"] or "(model)",
            _gflop(r["fwd_flops"]),
            _gflop(r["bwd_flops"]),
            f"{r['params']:,}",
            fmt_bytes(r["out_bytes"]),
            fmt_bytes(r["saved_bytes"]),
            fmt_bytes(r["cut_bytes"]),
        )
    saved = sum(r["saved_bytes"] for r in report["layers"])
    table.add_row(
        "total",
        _gflop(report["total_fwd_flops"]),
        _gflop(report["total_bwd_flops"]),
        f"{report['total_params']:,}",
        "",
        fmt_bytes(saved),
        "",
        style="bold",
    )
    return table


def inspect(
    model: Annotated[
        str,
        typer.Argument(
            help="Zoo name (transformers take NAME:layers=,hidden=,heads=,seq=,vocab=), "
            "path/to/file.py:fn or pkg.mod:fn."
        ),
    ],
    *,
    dataset: Annotated[str | None, typer.Option(help="mnist, cifar10, imagenet, highres.")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Samples the figures are for.")] = 1,
    depth: Annotated[int | None, typer.Option(min=1, help="Module depth of the layers.")] = None,
    dtype: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per-layer FLOPs, parameters, activation, saved and cut bytes of a model."""
    from hetplan.graph.extract import build_graph

    try:
        with working(f"tracing {model}", quiet=json_out):
            graph = build_graph(model, dataset=dataset, depth=depth, dtype=dtype)
    except HetplanError as err:
        raise _fail(err) from None
    report = inspect_report(graph, dataset, batch)
    if json_out:
        print_json(report)
        return
    _wide().print(_table(report))
    for note in graph.notes:
        console.print(f"note: {note}")


def register(app: typer.Typer) -> None:
    """Add ``models`` and ``inspect`` to ``app``."""
    app.command("models")(models)
    app.command("inspect")(inspect)
