"""Pricing a GPU type nobody measured from another one: public profiles of six GPU types.

No GPU needed. Data: ``benchmarks/data/sailor_aceso_layers.csv`` (written by
``scripts/sailor_aceso.py`` from Sailor's repository, github.com/eth-easl/sailor, MIT licence,
ETH Zurich): three GPT-style models (OPT-350, GPT-Neo-2.7, OPT-30 at sequence 2048, Megatron-LM
layers) timed by Aceso's operator profiler on A100-40, GH200 (96 GB), V100-16, RTX 3090,
TITAN RTX and RTX 2080 Ti, micro-batches 1-8. Each model's rows are imported into a hetplan
store as the zoo's ``gpt`` of the same shape (``hetplan import-profile``'s reader), one profile
per GPU type; every type is then priced from stores that hold *no data of that type*:

* **own profile elsewhere**: the model's own profiles on the other types (``predict``'s path:
  ``scaled from <type>``, :class:`hetplan.profile.measured.MeasuredCompute`);
* **never profiled**: the other two models' profiles on the other types (``learned on <ref>,
  scaled to <type> by specs``, :class:`hetplan.cost.learned_compute.LearnedCompute`);
* **catalog**: the spec-sheet roofline alone;
* **same type, other models** (not a transfer, for scale): the type's own profiles of the two
  other models (``learned on <type>``).

Reported: |error| of each layer's forward (embedding, one transformer block, head and loss)
against the target type's measured time, median / p90 / max over models, micro-batches and
layers; the whole forward per model; and, per pair of types, the block's forward error when
one type alone is the reference. Backward times are reported apart: Aceso's profiler takes the
gradients of an op's *inputs* only (``torch.autograd.grad(..., inputs=activations)``), so its
backward leaves out the weight gradients; it is the same work on every type, so the transfer
is still a fair test, but not a training step's backward.

fp16 by default. Aceso's fp32 runs on the A100, GH200 and RTX 3090 used TF32 matrix multiplies
(85-199 TFLOP/s on OPT-30's block on the first two, above their FP32 peaks), Megatron's default
and not torch's: ``--dtype fp32`` reads only the three types without TF32 (V100, TITAN RTX,
RTX 2080 Ti), or every type with ``--tf32-rows``.

With ``--tp``, tensor parallelism: one rank's block forward at TP 2, 4 and 8 against Aceso's
measure (Megatron's split, the TP all-reduces inside the ops it times), priced from the type's
own TP-1 profiles (``tp_rank_costs``) plus the all-reduces (``tp_comm_time``) over a node of
the type, its link from the catalog (``cluster.generate``) and, apart, the bandwidth Sailor
measured between that node's GPUs (``benchmarks/data/sailor_intra_node.csv``: one pair's share
when half the node's GPUs send to the other half at once). Forward only: the backward lacks the
weight gradients (above).

With ``--h100 GPU_TRUTH`` (``shared/gpu-truth``), last, the H100 from a store holding no
Hopper data at all (GH200 left out): the six models profiled there, layer by layer against their
profiles (windows timed with ``hetplan profile``'s hooks in them, which a prediction of a step
leaves out), and the three ``train`` steps through ``predict``. The store holds the fp16
profiles of the other five types (teaching bf16 where a type's peaks of both are equal) and the
fp32 profiles of the types without TF32 (V100, TITAN RTX, RTX 2080 Ti), for fp32.

    .venv/bin/python benchmarks/bench_gpu_types.py [--dtype fp16|fp32] [--data CSV] [--pairs]
        [--tp] [--h100 GPU_TRUTH]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bench_transfer import layer_errors, one_h100
from bench_transfer import stats as transfer_stats

from hetplan.cluster import Device, device_type
from hetplan.cluster.config import ClusterConfig
from hetplan.cluster.generate import generate_config
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import Cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.tp import tp_comm_time
from hetplan.cost.tp_compute import tp_rank_costs
from hetplan.cost.types import ComputeModel, LayerCost
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import predict
from hetplan.profile.importer import import_file
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profile, save_profile
from hetplan.profile.types import Profile
from hetplan.serde import from_data

DATA = Path(__file__).resolve().parent / "data" / "sailor_aceso_layers.csv"
LINKS = DATA.parent / "sailor_intra_node.csv"
MODELS = {
    "OPT-350": "gpt:layers=24,hidden=1024,heads=16,seq=2048,vocab=50272",
    "GPT-Neo-2.7": "gpt:layers=32,hidden=2560,heads=32,seq=2048,vocab=128256",
    "OPT-30": "gpt:layers=48,hidden=7168,heads=56,seq=2048,vocab=50272",
}
"""Sailor's model names -> the zoo's ``gpt`` of their shapes (Sailor's training configs and
Aceso's ``model_configs.py``: layers, hidden, heads, sequence 2048, vocabulary)."""
GPUS = {
    "A100-40": "A100-40GB",
    "GH-96": "GH200",
    "V100-16": "V100-16GB",
    "RTX-3090": "RTX3090",
    "Titan-RTX": "TitanRTX",
    "RTX-2080": "RTX2080-Ti",
}
"""Sailor's GPU names -> hetplan's catalog (Sailor's ``RTX-2080`` has 11 GB: a 2080 Ti)."""
PARTS = ("embed", "block", "head")
HOPPER = "GH200"
"""Left out of the H100's store: its GPU is an H100."""
TRUE_FP32 = frozenset({"V100-16GB", "TitanRTX", "RTX2080-Ti"})
"""Types whose fp32 rows are FP32 (Megatron turns TF32 on from Ampere: A100, GH200, RTX 3090)."""

Measured = dict[tuple[str, str, int], dict[str, tuple[float, float]]]
"""(catalog type, model, micro-batch) -> part -> (forward, backward) seconds."""
MeasuredTp = dict[tuple[str, str, int, int], dict[str, tuple[float, float]]]
"""(catalog type, model, micro-batch, TP degree) -> part -> one rank's seconds."""
TP_NODE = 8
"""Devices of a node in the TP check (Sailor's nodes: eight GPUs, four on the GH200's)."""


def read_data(path: Path, dtype: str, tf32_rows: bool = False, tp: int = 1) -> Measured:
    """The file's rows of ``dtype`` at TP degree ``tp``; fp32 only of :data:`TRUE_FP32`
    unless ``tf32_rows``."""
    return {(k, m, b): parts for (k, m, b, t), parts in read_tp(path, dtype, tf32_rows).items()
            if t == tp}  # fmt: skip


def read_tp(path: Path, dtype: str, tf32_rows: bool = False) -> MeasuredTp:
    """The file's rows of ``dtype`` at every TP degree (one rank's times)."""
    out: MeasuredTp = defaultdict(dict)
    with path.open() as f:
        for r in csv.DictReader(f):
            fp32_ok = tf32_rows or GPUS[r["gpu"]] in TRUE_FP32
            if r["dtype"] == dtype and (dtype != "fp32" or fp32_ok):
                key = (GPUS[r["gpu"]], r["model"], int(r["micro_batch"]), int(r["tp"]))
                out[key][r["part"]] = (float(r["fwd_us"]) * 1e-6, float(r["bwd_us"]) * 1e-6)
    return dict(out)


def import_rows(graph: ModelGraph, model: str, dtype: str, data: Measured) -> list[list[str]]:
    """The model's rows in ``hetplan import-profile``'s format (every block the block's time)."""
    rows = []
    for (kind, name, mbs), parts in sorted(data.items()):
        if name != model:
            continue
        for layer in graph.layers:
            fwd, bwd = parts["block" if layer.name.startswith("block") else layer.name]
            rows.append([layer.name, kind, dtype, str(mbs), f"{fwd:.9f}", f"{bwd:.9f}"])
    return rows


def import_all(data: Measured, dtype: str, work: Path) -> list[Profile]:
    """Every (model, GPU type) of ``data`` as a hetplan profile."""
    profiles = []
    for model, spec in MODELS.items():
        graph = build_graph(ModelRef(name=spec, dtype=dtype))
        path = work / f"{model}.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["layer", "device_type", "dtype", "micro_batch", "fwd_s", "bwd_s"])
            w.writerows(import_rows(graph, model, dtype, data))
        profiles += import_file(path, spec)
    return profiles


def store_of(profiles: Iterable[Profile]) -> Path:
    store = Path(tempfile.mkdtemp(prefix="hetplan-gputypes-"))
    for p in profiles:
        save_profile(p, store)
    return store


def spec_model(spec: str) -> str:
    return next(m for m, s in MODELS.items() if s == spec)


Pricer = Callable[[str, str], ComputeModel | None]
"""(target type, model) -> the compute model to price it with (None: nothing to price from)."""


@dataclass
class Errors:
    """What :func:`errors` found: per pass (0 forward, 1 backward) the |error| of every part,
    the forward's per part, the whole model's signed errors, and the sources that priced."""

    parts: dict[int, list[float]] = field(default_factory=lambda: {0: [], 1: []})
    forward: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PARTS})
    whole: dict[int, list[float]] = field(default_factory=lambda: {0: [], 1: []})
    sources: set[str] = field(default_factory=set)


def errors(data: Measured, dtype: str, kinds: list[str], pricer: Pricer) -> Errors:
    """Every measured (type, model, micro-batch) of ``kinds`` against ``pricer``'s prices."""
    out = Errors()
    for kind in kinds:
        for model, spec in MODELS.items():
            compute = pricer(kind, model)
            if compute is None:
                continue
            graph = build_graph(ModelRef(name=spec, dtype=dtype))
            dev = Device(id="g.0", type=device_type(kind), node="g", index=0)
            for (k, m, mbs), meas in sorted(data.items()):
                if (k, m) == (kind, model):
                    _compare(out, meas, graph, compute.layer_costs(graph, dev, mbs))
    return out


def _compare(
    out: Errors, meas: dict[str, tuple[float, float]], graph: ModelGraph, costs: list[LayerCost]
) -> None:
    out.sources.update(c.source for c in costs)
    named = dict(zip(_names(graph), costs, strict=True))
    for i in (0, 1):
        for part in PARTS:
            err = abs((named[part].fwd_s, named[part].bwd_s)[i] / meas[part][i] - 1)
            out.parts[i].append(err)
            if i == 0:
                out.forward[part].append(err)
        pred_sum = sum((c.fwd_s, c.bwd_s)[i] for c in costs)
        meas_sum = sum(meas[n][i] for n in _names(graph))
        out.whole[i].append(pred_sum / meas_sum - 1)


def _names(graph: ModelGraph) -> list[str]:
    """Layer names with every block called ``block`` (the first block stands for them all)."""
    return ["block" if x.name.startswith("block") else x.name for x in graph.layers]


def stats(values: list[float]) -> str:
    """``bench_transfer``'s median / p90 / max, with the count; ``-`` for none."""
    return f"{transfer_stats(values)} ({len(values)})" if values else "-"


def whole_stats(signed: list[float]) -> str:
    vals = np.abs(np.array(signed))
    return f"{np.median(vals):.1%} / {vals.max():.1%}" if len(vals) else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "fp32"))
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--pairs", action="store_true", help="also each reference type alone")
    ap.add_argument("--tf32-rows", action="store_true", help="fp32: also the TF32 types")
    ap.add_argument("--tp", action="store_true", help="also TP ranks against their measure")
    ap.add_argument("--h100", type=Path, help="shared/gpu-truth: the H100 from no Hopper data")
    args = ap.parse_args()
    data = read_data(args.data, args.dtype, args.tf32_rows)
    work = Path(tempfile.mkdtemp(prefix="hetplan-gputypes-in-"))
    profiles = import_all(data, args.dtype, work)
    kinds = sorted({p.device_type for p in profiles})
    stores: list[Path] = [work]

    def from_store(keep: Callable[[Profile], bool]) -> ComputeModel | None:
        kept = [p for p in profiles if keep(p)]
        if not kept:
            return None
        store = store_of(kept)
        stores.append(store)
        return compute_model(args.dtype, directory=store)

    methods: dict[str, Pricer] = {
        "own profile elsewhere": lambda t, m: from_store(lambda p: p.device_type != t),
        "never profiled": lambda t, m: from_store(
            lambda p: p.device_type != t and spec_model(p.model) != m
        ),
        "catalog": lambda t, m: AnalyticalCompute(args.dtype),
        "same type, other models": lambda t, m: from_store(
            lambda p: p.device_type == t and spec_model(p.model) != m
        ),
    }
    print(f"dtype {args.dtype}; types {', '.join(kinds)}; {len(data)} (type, model, batch) groups")
    print("\n| target | method | forward: median / p90 / max (n) | backward (inputs' gradients) "
          "| whole forward median / max |\n|---|---|---|---|---|")  # fmt: skip
    overall: dict[str, dict[int, list[float]]] = {k: {0: [], 1: []} for k in methods}
    forward: dict[str, dict[str, list[float]]] = {k: {p: [] for p in PARTS} for k in methods}
    for kind in kinds:
        for label, pricer in methods.items():
            res = errors(data, args.dtype, [kind], pricer)
            for i in (0, 1):
                overall[label][i] += res.parts[i]
            for part in PARTS:
                forward[label][part] += res.forward[part]
            print(f"| {kind} | {label} | {stats(res.parts[0])} | {stats(res.parts[1])} | "
                  f"{whole_stats(res.whole[0])} |")  # fmt: skip
            if label == "own profile elsewhere":
                print(f"|  | sources | {'; '.join(sorted(res.sources))} | | |")
    print("\n| method | forward, every type | backward, every type |\n|---|---|---|")
    for label, by_pass in overall.items():
        print(f"| {label} | {stats(by_pass[0])} | {stats(by_pass[1])} |")
    print("\n| method | " + " | ".join(f"{p} forward" for p in PARTS) + " |")
    print("|---" * (len(PARTS) + 1) + "|")
    for label, named_parts in forward.items():
        print(f"| {label} | " + " | ".join(stats(named_parts[p]) for p in PARTS) + " |")
    if args.pairs:
        pair_table(data, args.dtype, kinds, profiles, stores)
    if args.tp:
        tp_check(read_tp(args.data, args.dtype, args.tf32_rows), args.dtype, profiles, stores)
    if args.h100:
        h100_check(args.h100, args.data, work, stores)
    for s in stores:
        shutil.rmtree(s, ignore_errors=True)


def pair_table(
    data: Measured, dtype: str, kinds: list[str], profiles: list[Profile], stores: list[Path]
) -> None:
    """Forward |error| median per (reference, target): the model's own profile on one type."""
    print("\n| reference \\ target | " + " | ".join(kinds) + " |")
    print("|---" * (len(kinds) + 1) + "|")
    for ref in kinds:
        store = store_of(p for p in profiles if p.device_type == ref)
        stores.append(store)
        compute = compute_model(dtype, directory=store)
        cells = []
        for kind in kinds:
            if kind == ref:
                cells.append("-")
                continue
            res = errors(data, dtype, [kind], _always(compute))
            cells.append(f"{np.median(res.parts[0]):.0%}")
        print(f"| {ref} | " + " | ".join(cells) + " |")


def _always(compute: ComputeModel) -> Pricer:
    """A pricer that answers ``compute`` for every type and model."""
    return lambda kind, model: compute


def read_links(path: Path) -> dict[tuple[str, int], float]:
    """(catalog type, GPUs) -> GB/s of one of the concurrent pairs Sailor measured there."""
    with path.open() as f:
        return {
            (GPUS[r["gpu"]], int(r["gpus"])): float(r["per_pair_GBps"])
            for r in csv.DictReader(f)
            if r["gpu"] in GPUS
        }


def measured_link(config: ClusterConfig, gbps: float) -> Cluster:
    """``config``'s one node with its link's bandwidth replaced by ``gbps`` (latency kept)."""
    node = config.nodes[0]
    assert node.link is not None
    link = dataclasses.replace(node.link, bandwidth_GBps=gbps)
    nodes = [dataclasses.replace(node, link=link)]
    return resolve_config(dataclasses.replace(config, nodes=nodes), "measured link")


def tp_check(data: MeasuredTp, dtype: str, profiles: list[Profile], stores: list[Path]) -> None:
    """One TP rank's block, forward, against Aceso's measure at TP 2-8 on a node of the type:
    ``tp_rank_costs`` of the type's own TP-1 profiles plus ``tp_comm_time`` over the node's
    link from the catalog (``cluster.generate``). And the speedup of a rank over TP 1."""
    print("\n| type (catalog link; measured a pair) | tp | block forward \\|error\\|, catalog "
          "link: median / max (n) | measured link | speedup over tp 1: measured | priced "
          "(measured link) |\n|---|---|---|---|---|---|")  # fmt: skip
    every: list[float] = []
    every_m: list[float] = []
    links = read_links(LINKS)
    for kind in sorted({k for k, _, _, t in data if t > 1}):
        store = store_of(p for p in profiles if p.device_type == kind)
        stores.append(store)
        compute = compute_model(dtype, directory=store)
        config = generate_config([(kind, 1)], per_node=TP_NODE)
        cluster = resolve_config(config, f"one {kind} node")
        rows: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
        for (k, model, mbs, tp), meas in sorted(data.items()):
            one = data.get((k, model, mbs, 1))
            if k != kind or tp == 1 or one is None:
                continue
            graph = build_graph(ModelRef(name=MODELS[model], dtype=dtype))
            i = _names(graph).index("block")
            dev = cluster.devices[0]
            group = [d.id for d in cluster.devices[:tp]]
            rank = tp_rank_costs(compute, graph, dev, mbs, tp)[i].fwd_s
            pred = rank + tp_comm_time(graph.layers[i], mbs, dtype, group, cluster)[0]
            on_measured = links.get((kind, tp))
            pred_m = math.nan
            if on_measured is not None:
                node = measured_link(config, on_measured)
                pred_m = rank + tp_comm_time(graph.layers[i], mbs, dtype, group, node)[0]
            pred_one = compute.layer_costs(graph, dev, mbs)[i].fwd_s
            got = meas["block"][0]
            pair = (abs(pred / got - 1), abs(pred_m / got - 1))
            rows[tp].append((*pair, one["block"][0] / got, pred_one / pred_m))
        link = config.nodes[0].link
        for tp, found in sorted(rows.items()):
            errs, on_links = [r[0] for r in found], [r[1] for r in found]
            every += errs
            every_m += on_links
            bw = links.get((kind, tp), math.nan)
            print(f"| {kind} ({link.type if link else '-'}; measured {bw:.1f} GB/s) | {tp} | "
                  f"{np.median(errs):.1%} / {max(errs):.1%} ({len(errs)}) | "
                  f"{np.median(on_links):.1%} / {max(on_links):.1%} | "
                  f"{np.median([r[2] for r in found]):.2f}x | "
                  f"{np.median([r[3] for r in found]):.2f}x |")  # fmt: skip
    print(f"\nTP ranks' block forward, every type: catalog links {stats(every)}; "
          f"measured links {stats([e for e in every_m if not math.isnan(e)])}")  # fmt: skip


def h100_check(truth: Path, path: Path, work: Path, stores: list[Path]) -> None:
    """The H100's profiles and ``train`` steps from a store with no Hopper data (module doc)."""
    teach = [
        p
        for dtype in ("fp16", "fp32")
        for p in import_all(read_data(path, dtype), dtype, work)
        if p.device_type != HOPPER
    ]
    store = store_of(teach)
    stores.append(store)
    print(f"\nH100 from {len(teach)} profiles of other types (no Hopper)\n")
    print(
        "| H100 profile | sources | layers: median / p90 / max | whole model "
        "| catalog alone: layers | whole model |\n|---|---|---|---|---|---|"
    )
    every: list[float] = []
    catalog: list[float] = []
    for prof_path in sorted((truth / "h100" / "profiles").glob("*.json")):
        prof = load_profile(prof_path)
        compute = compute_model(prof.dtype, directory=store)
        graph = build_graph(ModelRef(name=prof.model, dataset=prof.dataset, dtype=prof.dtype))
        dev = Device(id="g.0", type=device_type(prof.device_type), node="g", index=0)
        sources = sorted({c.source for c in compute.layer_costs(graph, dev, prof.batch_sizes[0])})
        errs, whole = layer_errors(prof, compute)
        every += errs
        plain, plain_whole = layer_errors(prof, AnalyticalCompute(prof.dtype))
        catalog += plain
        print(f"| {prof.model} {prof.dtype} | {'; '.join(sources)} | {stats(errs)} | "
              f"{', '.join(whole)} | {stats(plain)} | {', '.join(plain_whole)} |")  # fmt: skip
    print(f"\nall layers: {stats(every)}; catalog alone {stats(catalog)}")
    print("\n| train run | measured | predicted | catalog alone |\n|---|---|---|---|")
    for run in sorted((truth / "h100" / "train").glob("*.json")):
        got = json.loads(run.read_text())
        plan = from_data(Plan, got["plan"], str(run))
        graph = build_graph(plan.model)
        cells = [f"| {run.stem} | {got['measured_iteration_s'] * 1e3:.1f} ms"]
        for compute in (
            compute_model(graph.dtype, directory=store),
            AnalyticalCompute(graph.dtype),
        ):
            pred = predict(plan, graph, one_h100(), compute).iteration_time_s
            cells.append(f"{pred * 1e3:.1f} ms ({pred / got['measured_iteration_s'] - 1:+.1%})")
        print(" | ".join(cells) + " |")


if __name__ == "__main__":
    main()
