"""``hetplan predict``: time, memory, power and energy of one explicit plan."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hetplan.cli.help_text import DTYPE_HELP
from hetplan.cli.output import console, print_json
from hetplan.cli.paths import OtherClusterOpt, check_input_dir, check_output
from hetplan.cli.predict_view import print_prediction
from hetplan.cli.status import Terminal
from hetplan.errors import InputError
from hetplan.plan.options import check_batch

# The flow (tracer, predictor, profiles: numpy and torch) and the schedule grid (numpy) load
# inside the command: `hetplan --help` stays quick.
# ruff: noqa: PLC0415


def _ints(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _reject_with_plan(given: dict[str, bool]) -> None:
    """Options that build a plan contradict ``--plan``: say so instead of ignoring them."""
    clash = [name for name, is_set in given.items() if is_set]
    if clash:
        raise InputError(
            f"{', '.join(clash)} cannot be combined with --plan (the plan file sets it)"
        )


def predict_cmd(
    cluster: Annotated[Path, typer.Option("--cluster", help="Cluster file (YAML or JSON).")],
    model: Annotated[str | None, typer.Option("--model", help="Zoo name or file.py:fn.")] = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Plan file (JSON).")] = None,
    strategy: Annotated[
        str | None, typer.Option(help="dp|ps|gpipe|1f1b|pipedream|hybrid|fsdp")
    ] = None,
    dp: Annotated[int | None, typer.Option(help="Data-parallel replicas (pipelines).")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline stages.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree of every stage.")] = 1,
    microbatches: Annotated[int | None, typer.Option(help="Micro-batches per replica.")] = None,
    microbatch_size: Annotated[int | None, typer.Option(help="Samples per micro-batch.")] = None,
    partition: Annotated[str | None, typer.Option(help="Layer indices where stages start.")] = None,
    devices: Annotated[str | None, typer.Option(help="Cluster ids in stage order.")] = None,
    batch: Annotated[int | None, typer.Option(help="Global batch (samples/iteration).")] = None,
    dataset: Annotated[str | None, typer.Option(help="Input preset: mnist, cifar10, ...")] = None,
    dataset_size: Annotated[int | None, typer.Option(help="Samples per epoch.")] = None,
    optimizer: Annotated[str, typer.Option(help="sgd, momentum or adam.")] = "sgd",
    dtype: Annotated[
        str | None, typer.Option("--dtype", help=DTYPE_HELP + " Default fp32.")
    ] = None,
    sync: Annotated[str, typer.Option(help="hybrid: bsp or wsp.")] = "bsp",
    staleness: Annotated[int, typer.Option(help="WSP staleness bound D.")] = 0,
    ps_devices: Annotated[
        str | None, typer.Option(help="ps: shard hosts (default: one on every worker).")
    ] = None,
    ps_async: Annotated[bool, typer.Option("--ps-async", help="Asynchronous PS.")] = False,
    zero: Annotated[
        int | None,
        typer.Option(
            "--zero",
            help="fsdp: the ZeRO stage, 1 (optimizer state sharded), 2 or 3 (FSDP2; default); "
            "hybrid with --shard-stages: 2 or 3.",
        ),
    ] = None,
    shard_stages: Annotated[
        bool,
        typer.Option(
            "--shard-stages",
            help="hybrid: each stage's replicas shard it with FSDP2 instead of all-reducing.",
        ),
    ] = False,
    recompute: Annotated[
        bool, typer.Option("--recompute", help="Activation recomputation.")
    ] = False,
    recompute_mode: Annotated[
        str | None,
        typer.Option(
            "--recompute-mode",
            help="Which micro-batches recompute: all (default) or except_last (torchgpipe's "
            "default: not each iteration's last); implies --recompute.",
        ),
    ] = None,
    grid: Annotated[bool, typer.Option("--grid", help="Print the schedule grid.")] = False,
    profiles: Annotated[Path | None, typer.Option(help="Profile store directory.")] = None,
    analytical: Annotated[
        bool, typer.Option("--analytical", help="Ignore measured profiles.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write the plan (built from the options) to this file.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="Also write a self-contained page: Gantt chart, memory.")
    ] = None,
    other_cluster: OtherClusterOpt = False,
) -> None:
    """Predict iteration/epoch time, throughput, memory, power, energy and EDP of one plan."""
    from hetplan.predict.build import parse_dtype
    from hetplan.schedule import format_grid
    from hetplan.usecases.predict import PlanOptions, PredictRequest, predict_plan

    precision = parse_dtype(dtype) if dtype is not None else "fp32"
    if plan_file is not None:
        _reject_with_plan(
            {
                "--strategy": strategy is not None,
                "--dp": dp is not None,
                "--pp": pp is not None,
                "--tp": tp != 1,
                "--microbatches": microbatches is not None,
                "--microbatch-size": microbatch_size is not None,
                "--partition": partition is not None,
                "--devices": devices is not None,
                "--batch": batch is not None,
                "--dataset": dataset is not None,
                "--optimizer": optimizer != "sgd",
                "--dtype": dtype is not None,
                "--sync": sync != "bsp",
                "--staleness": staleness != 0,
                "--ps-devices": ps_devices is not None,
                "--ps-async": ps_async,
                "--zero": zero is not None,
                "--shard-stages": shard_stages,
                "--recompute": recompute,
                "--recompute-mode": recompute_mode is not None,
            }
        )
    _check_outputs(out, html, batch)
    check_input_dir(profiles, "--profiles")
    build = None
    if strategy is not None:
        build = PlanOptions(
            strategy=strategy, batch=batch, dp=dp, pp=pp, tp=tp, micro_batches=microbatches,
            micro_batch_size=microbatch_size, partition=_ints(partition, "--partition"),
            devices=_names(devices), optimizer=optimizer, sync=sync, staleness=staleness,
            ps_devices=_names(ps_devices), ps_async=ps_async,
            recompute=recompute or recompute_mode is not None,
            recompute_mode=recompute_mode or "all", zero=zero, shard_stages=shard_stages,
        )  # fmt: skip
    req = PredictRequest(
        cluster=cluster, model=model, plan_file=plan_file, build=build, dataset=dataset,
        dtype=precision, dataset_size=dataset_size, profiles=profiles, analytical=analytical,
        other_cluster=other_cluster, out=out, html=html,
    )  # fmt: skip
    pred = predict_plan(req, Terminal(quiet=as_json)).prediction
    if as_json:
        print_json(pred.to_json())
        return
    print_prediction(pred)
    if grid:
        console.print(format_grid(pred.timeline.schedule, pred.timeline.start), markup=False)
    for what, path in (("plan", out), ("page", html)):
        if path is not None:
            console.print(f"wrote the {what} to {path}")


def _check_outputs(out: Path | None, html: Path | None, batch: int | None) -> None:
    """Output paths and the batch, before any work."""
    for option, path in (("--out", out), ("--html", html)):
        if path is not None:
            check_output(path, option)
    if batch is not None:
        check_batch(batch)


def register(app: typer.Typer) -> None:
    """Add ``predict`` to ``app``."""
    app.command("predict")(predict_cmd)
