"""``hetplan devices`` (the device catalog), ``hetplan cluster show FILE`` and ``hetplan cluster
generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.box import SIMPLE_HEAD
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_output
from hetplan.cluster import DEVICE_CATALOG, load_cluster_config, write_cluster_config
from hetplan.cluster.generate import generate_config
from hetplan.cluster.summary import ClusterSummary, NodeSummary, PairLink, summarize_config
from hetplan.errors import InputError
from hetplan.serde import to_data
from hetplan.units import GB, TERA, fmt_bytes, fmt_seconds, plural

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (SI units) instead of a table.")]


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def devices(as_json: JsonOpt = False) -> None:
    """List the device catalog: peak compute, memory, bandwidth, power and price."""
    if as_json:
        print_json([to_data(dt) for dt in DEVICE_CATALOG.values()])
        return
    table = Table(title="Device catalog (dense peak figures; sources: --json)", box=SIMPLE_HEAD)
    for col in ("name", "fp32 TF/s", "fp16 TF/s", "mem GB", "mem GB/s"):
        table.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    for col in ("idle W", "max W", "$/h"):
        table.add_column(col, justify="right", no_wrap=True)
    for dt in DEVICE_CATALOG.values():
        table.add_row(
            dt.name,
            f"{dt.flops('fp32') / TERA:.3g}",
            f"{dt.flops('fp16') / TERA:.3g}",
            f"{dt.memory_bytes / GB:.3g}",
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


TABLE_ROWS = 64
"""Most node rows ``cluster show`` prints. Beyond, consecutive nodes with the same row share
one, then the rest is counted (``--json`` lists every node): rich takes ~0.3 ms a row, and
10,000 rows help nobody."""

Row = tuple[str, str, str, str]


def _node_rows(nodes: list[NodeSummary]) -> list[Row]:
    rows = [
        (
            n.name,
            ", ".join(f"{c}x {t}" for t, c in n.devices.items()),
            n.intra_link or "-",
            n.network or "-",
        )
        for n in nodes
    ]
    if len(rows) <= TABLE_ROWS:
        return rows
    runs: list[tuple[Row, Row, int]] = []  # first row, last row, nodes
    for row in rows:
        if runs and runs[-1][0][1:] == row[1:]:
            runs[-1] = (runs[-1][0], row, runs[-1][2] + 1)
        else:
            runs.append((row, row, 1))
    merged = [
        (first if count == 1 else (f"{first[0]} .. {last[0]} ({count} nodes)", *first[1:]))
        for first, last, count in runs
    ]
    if len(merged) <= TABLE_ROWS:
        return merged
    rest = sum(count for _, _, count in runs[TABLE_ROWS - 1 :])
    return [*merged[: TABLE_ROWS - 1], (f"... {rest} more nodes (--json lists all)", "", "", "")]


def _print_summary(s: ClusterSummary) -> None:
    table = Table(
        title=f"Cluster {s.name}: {plural(s.num_devices, 'device')}, {plural(len(s.nodes), 'node')}"
    )
    for col in ("node", "devices", "intra-node link", "network"):
        table.add_column(col)
    for row in _node_rows(s.nodes):
        table.add_row(*row)
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
    if s.collective_step_s is not None:
        console.print(f"collective step latency (measured cap): {fmt_seconds(s.collective_step_s)}")
    if s.collective_bandwidth is not None:
        rate = s.collective_bandwidth / GB
        console.print(f"collective step bandwidth (measured cap): {rate:g} GB/s")


def show(
    file: Annotated[Path, typer.Argument(help="Cluster file (YAML or JSON).")],
    as_json: JsonOpt = False,
) -> None:
    """Validate a cluster file and summarise it."""
    # From the file's nodes and device groups: no device objects, whatever the counts.
    summary = summarize_config(load_cluster_config(file), str(file))
    if as_json:
        data: Any = to_data(summary)
        print_json(data)
        return
    _print_summary(summary)


def parse_node_types(text: str) -> list[tuple[str, int]]:
    """``"A100-80GB:32,T4:16"`` -> ``[("A100-80GB", 32), ("T4", 16)]``."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, count = part.rpartition(":")
        if not name.strip() or not count.strip().isdigit():
            raise InputError(
                f"--nodes: {part!r}; expected TYPE:COUNT pairs like A100-80GB:32,T4:16"
            )
        out.append((name.strip(), int(count)))
    return out


def generate(
    nodes: Annotated[
        str,
        typer.Option(
            help="Catalog device type and node count, comma-separated: A100-80GB:32,T4:16."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Cluster file to write (YAML).")],
    per_node: Annotated[int, typer.Option(help="Devices per node.")] = 8,
    network: Annotated[str, typer.Option(help="Network link of every node (link catalog).")] = (
        "100GbE"
    ),
    name: Annotated[str | None, typer.Option(help="Cluster name (default generated-N).")] = None,
) -> None:
    """Write a cluster file: per device type, that many nodes of --per-node devices with the
    type's intra-node link (NVLink on SXM boards, else PCIe), all on --network."""
    if out.suffix not in (".yaml", ".yml"):
        raise InputError(f"--out {out}: expected a .yaml or .yml file (cluster files are YAML)")
    if name is not None and not name.strip():
        raise InputError("--name: expected a non-empty name")
    # Every option is checked (the config is cheap to build) before the path is touched.
    config = generate_config(parse_node_types(nodes), per_node=per_node, network=network, name=name)
    check_output(out, "--out")
    write_cluster_config(out, config)
    devices = len(config.nodes) * per_node
    console.print(
        f"wrote {out}: cluster {config.name!r}, {len(config.nodes)} nodes, {devices} devices",
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``devices`` and the ``cluster`` sub-app to ``app``."""
    app.command("devices")(devices)
    cluster_app = typer.Typer(
        help="Cluster files: validate and summarise, generate.", no_args_is_help=True
    )
    cluster_app.command("show")(show)
    cluster_app.command("generate")(generate)
    app.add_typer(cluster_app, name="cluster")
