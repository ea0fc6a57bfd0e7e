"""``hetplan devices`` (the device catalog) and ``hetplan cluster show FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.box import SIMPLE_HEAD
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.cluster import DEVICE_CATALOG, load_cluster, summarize
from hetplan.cluster.summary import ClusterSummary, PairLink
from hetplan.serde import to_data
from hetplan.units import GB, TERA, GiB, fmt_bytes, fmt_seconds

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (SI units) instead of a table.")]


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def devices(as_json: JsonOpt = False) -> None:
    """List the device catalog: peak compute, memory, bandwidth, power and price."""
    if as_json:
        print_json([to_data(dt) for dt in DEVICE_CATALOG.values()])
        return
    table = Table(title="Device catalog (dense peak figures; sources: --json)", box=SIMPLE_HEAD)
    for col in ("name", "fp32 TF/s", "fp16 TF/s", "mem GiB", "mem GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    for col in ("idle W", "max W", "$/h"):
        table.add_column(col, justify="right", no_wrap=True)
    for dt in DEVICE_CATALOG.values():
        table.add_row(
            dt.name,
            f"{dt.flops('fp32') / TERA:.3g}",
            f"{dt.flops('fp16') / TERA:.3g}",
            f"{dt.memory_bytes / GiB:.3g}",
            f"{dt.memory_bandwidth / GB:.4g}",
            f"{dt.idle_power_w:.0f}",
            f"{dt.max_power_w:.3g}",
            _opt(dt.price_per_hour, ".2f"),
        )
    console.print(table)


def _pair(label: str, pair: PairLink | None) -> str:
    if pair is None:
        return f"{label}: - (single device)"
    return (
        f"{label}: {pair.a} <-> {pair.b} {pair.kind}, {pair.bandwidth / GB:.4g} GB/s, "
        f"{fmt_seconds(pair.latency_s)}"
    )


def _print_summary(s: ClusterSummary) -> None:
    table = Table(title=f"Cluster {s.name}: {s.num_devices} devices, {len(s.nodes)} nodes")
    for col in ("node", "devices", "intra-node link", "network"):
        table.add_column(col)
    for node in s.nodes:
        devs = ", ".join(f"{n}x {t}" for t, n in node.devices.items())
        table.add_row(node.name, devs, node.intra_link or "-", node.network or "-")
    console.print(table)
    types = ", ".join(f"{n}x {t}" for t, n in s.device_counts.items())
    console.print(f"device types: {types}")
    console.print(f"total memory: {fmt_bytes(s.total_memory_bytes)}")
    console.print(
        f"total peak compute: {s.total_fp32_flops / TERA:.4g} TFLOP/s fp32, "
        f"{s.total_fp16_flops / TERA:.4g} TFLOP/s fp16"
    )
    console.print(_pair("slowest link", s.slowest_link))
    console.print(_pair("fastest link", s.fastest_link))
    console.print(f"collective overhead: {fmt_seconds(s.collective_overhead_s)}")


def show(
    file: Annotated[Path, typer.Argument(help="Cluster file (YAML or JSON).")],
    as_json: JsonOpt = False,
) -> None:
    """Validate a cluster file and summarise it."""
    summary = summarize(load_cluster(file))
    if as_json:
        data: Any = to_data(summary)
        print_json(data)
        return
    _print_summary(summary)


def register(app: typer.Typer) -> None:
    """Add ``devices`` and the ``cluster`` sub-app to ``app``."""
    app.command("devices")(devices)
    cluster_app = typer.Typer(help="Cluster files: validate and summarise.", no_args_is_help=True)
    cluster_app.command("show")(show)
    app.add_typer(cluster_app, name="cluster")
