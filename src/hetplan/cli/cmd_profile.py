"""``hetplan profile`` (measured per-layer times), ``hetplan import-profile`` (per-layer times
measured by other tools) and ``hetplan profile-links`` (link figures).

``import-profile`` is a command of its own, not ``profile import``: ``profile`` takes the model
as its argument, so a subcommand group would break ``hetplan profile MODEL``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table

from hetplan.cli.output import console, print_json
from hetplan.cli.paths import check_output, check_output_dir
from hetplan.cli.status import working
from hetplan.cluster.config import load_cluster, load_cluster_config, write_cluster_config
from hetplan.errors import HetplanError, InputError
from hetplan.run.launch.spawn import launch_local
from hetplan.serde import to_data
from hetplan.units import fmt_bytes

# The profilers (torch) load inside the commands: `hetplan --help` stays quick.
# ruff: noqa: PLC0415
if TYPE_CHECKING:
    from hetplan.profile.links import AllreduceResult, LinkReport
    from hetplan.profile.types import Profile


def _fail(err: HetplanError) -> typer.Exit:
    print(f"hetplan: error: {err}", file=sys.stderr)
    return typer.Exit(2)


def parse_ints(text: str | None, what: str) -> tuple[int, ...] | None:
    """``"1,8,16"`` -> ``(1, 8, 16)``; None stays None."""
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{what} {text!r}: expected comma-separated integers") from None
    if not values or min(values) < 0:
        raise InputError(f"{what} {text!r}: expected comma-separated non-negative integers")
    return values


def check_store(out: Path | None) -> None:
    """``--out`` of ``profile`` and ``calibrate``: a writable JSON file or store folder,
    checked before measuring."""
    if out is not None and out.suffix == ".json":
        check_output(out, "--out")
    elif out is not None:
        check_output_dir(out, "--out")


def store_profile(profile: Profile, out: Path | None) -> Path:
    """``--out x.json`` writes that file; any other ``--out`` is a store directory. There a
    CPU profile of ``n > 1`` threads gets a file of its own (``<key>__t<n>.json``): the cost
    model prices a device by the profile of its thread count (``cost.threads``)."""
    from hetplan.profile.store import profile_path, save_profile, write_profile

    if out is not None and out.suffix == ".json":
        return write_profile(profile, out)
    if profile.device == "cpu" and profile.threads > 1:
        path = profile_path(profile, out)
        return write_profile(profile, path.with_name(f"{path.stem}__t{profile.threads}.json"))
    return save_profile(profile, out)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def profile_table(profile: Profile) -> Table:
    """Per-layer times at the largest batch (ms), with the fit that prices other sizes."""
    big = profile.batches[-1]
    title = (
        f"{profile.model} on {profile.device_type} ({profile.device_name}), batch {big.batch}, "
        f"{profile.dtype}, {profile.threads} thread(s); ms, median and p10-p90 of "
        f"{profile.steps} steps; fit t(b) = a + k*b of fwd+bwd"
    )
    table = Table(title=title)
    cols = ("layer", "fwd", "p10-p90", "bwd", "p10-p90", "fwd peak", "a", "k")
    for i, col in enumerate(cols):
        table.add_column(col, justify="left" if i == 0 else "right")
    for t, fit in zip(big.layers, profile.fits, strict=True):
        table.add_row(
            t.name,
            _ms(t.fwd.median_s),
            f"{_ms(t.fwd.p10_s)}-{_ms(t.fwd.p90_s)}",
            _ms(t.bwd.median_s),
            f"{_ms(t.bwd.p10_s)}-{_ms(t.bwd.p90_s)}",
            "-" if t.fwd_peak_bytes is None else fmt_bytes(t.fwd_peak_bytes),
            _ms(fit.fwd.a_s + fit.bwd.a_s),
            _ms(fit.fwd.k_s + fit.bwd.k_s),
        )
    fwd = sum(t.fwd.median_s for t in big.layers)
    bwd = sum(t.bwd.median_s for t in big.layers)
    table.add_row("sum of layers", _ms(fwd), "", _ms(bwd), "", "", "", "", style="bold")
    o, st = big.other, big.step
    table.add_row("other", _ms(o.median_s), f"{_ms(o.p10_s)}-{_ms(o.p90_s)}")
    table.add_row("whole step", _ms(st.median_s), f"{_ms(st.p10_s)}-{_ms(st.p90_s)}")
    return table


def profile(
    model: Annotated[str, typer.Argument(help="Zoo name, path/to/file.py:fn or pkg.mod:fn.")],
    dataset: Annotated[str | None, typer.Option(help="mnist, cifar10, imagenet, highres.")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Largest batch (set: 1, B/2, B).")] = 16,
    batches: Annotated[
        str | None, typer.Option(help="Explicit batch sizes, e.g. 1,4,8 (overrides --batch).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda:N.")] = "cpu",
    device_type: Annotated[
        str | None,
        typer.Option("--type", help="Device type to file it under (default: cpu / GPU name)."),
    ] = None,
    dtype: Annotated[str, typer.Option(help="fp32, fp16 or bf16.")] = "fp32",
    depth: Annotated[int | None, typer.Option(min=1, help="Module depth of the layers.")] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1, help="Intra-op threads (CPU default 1: one core; N prices cpus: of N cores)."
        ),
    ] = None,
    cpus: Annotated[str | None, typer.Option(help="Pin to these cores, e.g. 0 or 0,1.")] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed warm-up steps.")] = 3,
    steps: Annotated[int, typer.Option(min=1, help="Timed steps.")] = 10,
    optimizer: Annotated[str, typer.Option(help="sgd, momentum, adam or none.")] = "sgd",
    out: Annotated[
        Path | None,
        typer.Option(help="FILE.json, or a store directory (default $HETPLAN_PROFILE_DIR)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Measure forward and backward time of every layer on a local device and store it."""
    from hetplan.profile.model import ProfileRequest, profile_model

    check_store(out)
    try:
        if threads is None and device == "cpu":
            threads = 1  # the catalog's ``cpu`` type is one core
        req = ProfileRequest(
            model=model,
            dataset=dataset,
            batch=batch,
            batch_sizes=parse_ints(batches, "--batches"),
            device=device,
            device_type=device_type,
            dtype=dtype,
            depth=depth,
            threads=threads,
            cpus=parse_ints(cpus, "--cpus"),
            warmup=warmup,
            steps=steps,
            optimizer=optimizer,
        )
        with working(f"profiling {model} on {device}", quiet=json_out):
            result = profile_model(req)
        path = store_profile(result, out)
    except HetplanError as err:
        raise _fail(err) from None
    except OSError as err:
        raise _fail(InputError(str(err))) from None
    if json_out:
        data: dict[str, Any] = {"path": str(path), "profile": to_data(result)}
        print_json(data)
        return
    console.print(profile_table(result))
    for note in result.notes:
        console.print(f"note: {note}")
    console.print("other = whole step - sum of layers (loss, optimizer, glue between layers)")
    console.print(f"profile stored in {path}")


def _import_targets(profiles: list[Profile], out: Path | None) -> list[Path]:
    """Where each imported profile goes; a single ``--out FILE.json`` takes one profile."""
    from hetplan.profile.store import profile_path

    if out is not None and out.suffix == ".json":
        if len(profiles) > 1:
            groups = ", ".join(f"{p.device_type} {p.dtype} tp {p.tp}" for p in profiles)
            raise InputError(
                f"--out {out}: the file gives {len(profiles)} profiles ({groups}); give a "
                "folder to store them all"
            )
        return [out]
    return [profile_path(p, out) for p in profiles]


def _import_line(p: Profile, path: Path) -> str:
    sizes = ",".join(str(b) for b in p.batch_sizes)
    return (
        f"imported {p.model} on {p.device_type}, {p.dtype}, tp {p.tp}: {len(p.fits)} layers at "
        f"micro-batch {sizes}; stored in {path}"
    )


def import_profile(
    file: Annotated[Path, typer.Argument(help="CSV (header row) or JSON (list of rows).")],
    model: Annotated[str, typer.Option(help="Zoo name, path/to/file.py:fn or pkg.mod:fn.")],
    dataset: Annotated[str | None, typer.Option(help="mnist, cifar10, imagenet, highres.")] = None,
    depth: Annotated[int | None, typer.Option(min=1, help="Module depth of the layers.")] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="FILE.json (one profile), or a store directory (default: the store)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Import per-layer forward/backward times measured by another tool (one profile per
    device type, dtype and tp; format in docs/profiling.md) into the profile store."""
    from hetplan.profile.importer import import_file
    from hetplan.serde import write_json_atomic

    try:
        check_store(out)  # before the work (tracing the model)
        with working(f"reading {file}", quiet=json_out):
            profiles = import_file(file, model, dataset=dataset, depth=depth)
        paths = _import_targets(profiles, out)
        for p, path in zip(profiles, paths, strict=True):
            write_json_atomic(path, to_data(p))
    except HetplanError as err:
        raise _fail(err) from None
    if json_out:
        print_json({"profiles": [{"path": str(x), "device_type": p.device_type, "dtype": p.dtype,
                                  "tp": p.tp, "batch_sizes": list(p.batch_sizes)}
                                 for p, x in zip(profiles, paths, strict=True)]})  # fmt: skip
        return
    for p, path in zip(profiles, paths, strict=True):
        console.print(_import_line(p, path), soft_wrap=True)
        for note in p.notes:
            console.print(f"  note: {note}", soft_wrap=True)


_SIZE_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1K,64K,4M"`` -> bytes (binary suffixes K, M, G; plain numbers are bytes)."""
    out = []
    for part in (p.strip().upper() for p in text.split(",") if p.strip()):
        scale = _SIZE_SUFFIX.get(part[-1], 1)
        digits = part[:-1] if part[-1] in _SIZE_SUFFIX else part
        if not digits.isdigit() or int(digits) < 1:
            raise InputError(f"--sizes {text!r}: expected sizes like 1024, 64K or 4M")
        out.append(int(digits) * scale)
    if not out:
        raise InputError(f"--sizes {text!r}: expected at least one size")
    return tuple(out)


def _statistic(text: str) -> Literal["median", "p10"]:
    if text == "median":
        return "median"
    if text == "p10":
        return "p10"
    raise InputError(f"--stat {text!r}: expected median or p10")


def links_table(report: LinkReport, ids: list[str]) -> Table:
    title = f"point-to-point, {report.backend}: t(S) = latency + S / bandwidth"
    table = Table(title=f"{title}, fitted through the {report.statistic}")
    for i, col in enumerate(("pair", "latency us", "bandwidth GB/s", "largest message")):
        table.add_column(col, justify="left" if i == 0 else "right")
    for p in report.pairs:
        a, b = p.ranks
        big = p.one_way[-1]
        table.add_row(
            f"{ids[a]} - {ids[b]}",
            f"{p.latency_s * 1e6:.1f}",
            f"{p.bandwidth / 1e9:.3f}",
            f"{fmt_bytes(p.sizes[-1])} in {big.median_s * 1e6:.1f} us",
        )
    return table


def allreduce_lines(ar: AllreduceResult) -> list[str]:
    times = ", ".join(
        f"{fmt_bytes(s)}: {t.median_s * 1e6:.1f} us"
        for s, t in zip(ar.sizes, ar.times, strict=True)
    )
    bus = "-" if ar.bus_bandwidth is None else f"{ar.bus_bandwidth / 1e9:.3f} GB/s"
    return [
        f"allreduce on {ar.world_size} ranks (slowest rank, median): {times}",
        f"fit: {ar.fit.a_s * 1e6:.1f} us + S x {ar.fit.k_s * 1e9:.4f} ns/B (ring bus bandwidth "
        f"{bus}); ring latency terms {ar.ring_latency_s * 1e6:.1f} us -> collective overhead "
        f"{ar.overhead_s * 1e6:.1f} us",
        *(
            []
            if ar.step_latency_s is None
            else [
                f"the pairs overstate a collective's step: collective step latency "
                f"{ar.step_latency_s * 1e6:.1f} us (intercept / {2 * (ar.world_size - 1)} steps)"
            ]
        ),
        *(
            []
            if ar.step_bandwidth is None
            else [
                f"the pairs overstate a collective's bandwidth: collective step bandwidth "
                f"{ar.step_bandwidth / 1e9:.3f} GB/s (the slope's bus bandwidth)"
            ]
        ),
    ]


def profile_links(
    cluster: Annotated[Path, typer.Option(help="Cluster file (one node) whose links to measure.")],
    out: Annotated[Path, typer.Option(help="Cluster file to write (may be the same file).")],
    sizes: Annotated[
        str | None,
        typer.Option(help="Message sizes, e.g. 1K,64K,1M,4M (default 1K,16K,256K,4M,32M)."),
    ] = None,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed repetitions per size.")] = 2,
    iters: Annotated[int, typer.Option(min=1, help="Timed repetitions per size.")] = 10,
    statistic: Annotated[
        str, typer.Option("--stat", help="Fit through the median or p10 (busy machines).")
    ] = "median",
    allreduce: Annotated[bool, typer.Option(help="Also measure allreduce.")] = True,
    timeout: Annotated[float, typer.Option(min=1, help="Bound on the whole run, seconds.")] = 300,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Measure every pair's latency and bandwidth and allreduce time; write them to a cluster
    file (pair overrides and collective_overhead_us)."""
    from hetplan.profile.link_config import apply_report, benchmark_links
    from hetplan.profile.links import DEFAULT_SIZES, LinkBenchSettings

    check_output(out, "--out")
    try:
        settings = LinkBenchSettings(
            sizes=parse_sizes(sizes) if sizes else DEFAULT_SIZES,
            warmup=warmup,
            iters=iters,
            allreduce=allreduce,
            statistic=_statistic(statistic),
        )
        config = load_cluster_config(cluster)
        resolved = load_cluster(cluster)
        with working("measuring links", quiet=json_out):
            report = benchmark_links(resolved, settings, launch_local, timeout_s=timeout)
        write_cluster_config(out, apply_report(config, resolved, report))
    except HetplanError as err:
        raise _fail(err) from None
    except OSError as err:
        raise _fail(InputError(str(err))) from None
    if json_out:
        print_json({"cluster": str(out), "report": to_data(report)})
        return
    console.print(links_table(report, [d.id for d in resolved.devices]))
    if report.allreduce is not None:
        for line in allreduce_lines(report.allreduce):
            console.print(line)
    console.print(f"wrote {out}")


def profile_power(
    device_type: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="The cluster files' device type to fit (e.g. A100-40GB); default: the catalog "
            "type a GPU's name matches. On a CPU the counter covers whole packages: give a type "
            "whose devices stand for a whole package.",
        ),
    ] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda:K.")] = "cpu",
    seconds: Annotated[float, typer.Option(help="Seconds at rest and seconds under load.")] = 5.0,
    out: Annotated[Path | None, typer.Option(help="Profile store directory.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Measure a device's power at rest and under load with its energy counter (NVML on NVIDIA
    GPUs, RAPL on CPUs where readable) and fit the power model's idle and max watts, stored
    with the profiles (used by plan, predict, train and tune unless --analytical)."""
    from hetplan.profile.power_store import record_power_points
    from hetplan.run.meters.power_profile import measure_power_points

    if out is not None:
        check_output_dir(out, "--out")
    try:
        kind = _power_type(device_type, device)
        with working(f"measuring power of {device}", quiet=json_out):
            points, limit = measure_power_points(device, seconds)
        fit_limit = limit if limit is not None else _catalog_limit(kind, device)
        rec = record_power_points(kind, points, out, limit_w=fit_limit, direct=True)
    except HetplanError as err:
        raise _fail(err) from None
    data = {"device": device, "type": kind, "points": points, "power_limit_w": limit,
            "fit": to_data(rec.fit), "refused": rec.refused, "note": rec.note}  # fmt: skip
    if json_out:
        print_json(data)
        return
    idle, busy = points[0][1], points[-1][1]
    of = f" of the {limit:.0f} W limit ({100 * busy / limit:.0f}%)" if limit else ""
    console.print(f"{device} ({kind}): {idle:.1f} W at rest, {busy:.1f} W under load{of}")
    if rec.note is not None:
        console.print(f"power model of {kind}: {rec.note}", soft_wrap=True)
    if rec.refused is not None:
        console.print(f"power model of {kind} not refitted: {rec.refused}", soft_wrap=True)
    elif rec.fit is not None:
        console.print(
            f"power model of {kind}: idle {rec.fit.idle_w:.1f} W, max {rec.fit.max_w:.1f} W"
        )


def _catalog_limit(kind: str, device: str) -> float | None:
    """A GPU type's catalog maximum power where NVML gives no enforced limit (a CPU type's
    figure is per device, not the whole packages RAPL covers: no limit)."""
    from hetplan.cluster.catalog import DEVICE_CATALOG

    spec = DEVICE_CATALOG.get(kind)
    return spec.max_power_w if spec is not None and device.startswith("cuda") else None


def _power_type(named: str | None, device: str) -> str:
    """``--type``, else the catalog type of the GPU's name (a CPU needs it named)."""
    from hetplan.profile.model import device_type_for, torch_device

    if named is None and not device.startswith("cuda"):
        raise InputError("--type: name the device type a CPU package stands for (e.g. cpu)")
    return device_type_for(named, torch_device(device))


def register(app: typer.Typer) -> None:
    """Add ``profile``, ``import-profile``, ``profile-links`` and ``profile-power`` to
    ``app``."""
    app.command("profile")(profile)
    app.command("import-profile")(import_profile)
    app.command("profile-power")(profile_power)
    app.command("profile-links")(profile_links)
