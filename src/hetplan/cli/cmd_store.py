"""``hetplan store list`` and ``hetplan store remove``: what the profile store holds, with
provenance (profiled, written back, imported; when, steps, spread, sizes), and removing it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.errors import HetplanError

# The store's modules (numpy, pydantic) load inside the commands: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.profile.inventory import Entry

TypeOpt = Annotated[str | None, typer.Option("--type", help="Device type (e.g. cpu, H100-SXM).")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model name, as profiled.")]
StoreOpt = Annotated[
    Path | None,
    typer.Option("--profiles", help="Profile store directory (default: $HETPLAN_PROFILE_DIR)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _fail(err: HetplanError) -> typer.Exit:
    print(f"hetplan: error: {err}", file=sys.stderr)
    return typer.Exit(2)


def _json(e: Entry) -> dict[str, Any]:
    p = e.profile
    return {
        "file": str(e.path), "device_type": p.device_type, "model": p.model, "dtype": p.dtype,
        "input_shape": list(p.input_shape), "tp": p.tp, "source": e.source,
        "sizes": [{"micro_batch": b, "when": v.when, "steps": v.steps, "spread": v.spread,
                   "runs": v.runs} for b, v in e.sizes],
    }  # fmt: skip


def _table(found: list[Entry]) -> Table:
    table = Table()
    cols = ("type", "model", "dtype", "tp", "source", "micro-batch", "when (UTC)", "steps",
            "p90/p10", "runs", "file")  # fmt: skip
    for col in cols:
        table.add_column(col, overflow="fold")  # a file name whole, if on two lines
    for e in found:
        p = e.profile
        for b, v in e.sizes:
            spread = f"{v.spread:.2f}" if v.spread is not None else "-"
            steps = str(v.steps) if v.steps > 0 else "-"
            table.add_row(p.device_type, p.model, p.dtype, str(p.tp), e.source, str(b), v.when,
                          steps, spread, str(v.runs), e.path.name)  # fmt: skip
    return table


def list_cmd(
    device_type: TypeOpt = None,
    model: ModelOpt = None,
    profiles: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the store's profiles per device type and model, one row per micro-batch size,
    with provenance: source (profiled, written-back, imported), when, timed steps, spread."""
    from hetplan.profile.inventory import entries
    from hetplan.profile.store import profile_dir

    found = entries(profiles, device_type=device_type, model=model)
    if as_json:
        print_json({"store": str(profile_dir(profiles)), "profiles": [_json(e) for e in found]})
        return
    console.print(f"profile store: {profile_dir(profiles)}", soft_wrap=True)
    if not found:
        console.print("no profiles" + (" match" if device_type or model else ""))
        return
    console.print(_table(found))


def remove_cmd(
    device_type: Annotated[str, typer.Option("--type", help="Device type of the entries.")],
    model: Annotated[str, typer.Option("--model", help="Model of the entries.")],
    source: Annotated[
        str, typer.Option(help="Which entries: profiled, written-back, imported or all.")
    ] = "all",
    profiles: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove the store's profiles of a model on a device type (all, or those of one source);
    exit 2 when none matches."""
    from hetplan.profile.inventory import check_source, remove

    try:
        gone = remove(device_type, model, check_source(source), profiles)
    except HetplanError as err:
        raise _fail(err) from None
    if as_json:
        print_json({"removed": [_json(e) for e in gone]})
        return
    for e in gone:
        sizes = ", ".join(str(b) for b, _ in e.sizes)
        console.print(f"removed {e.source} profile (micro-batch {sizes}): {e.path}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``store`` sub-app (``list``, ``remove``) to ``app``."""
    store_app = typer.Typer(
        help="The profile store: list entries with provenance, remove them.", no_args_is_help=True
    )
    store_app.command("list")(list_cmd)
    store_app.command("remove")(remove_cmd)
    app.add_typer(store_app, name="store")
