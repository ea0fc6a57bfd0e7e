"""Prediction: time, memory, power and energy of one explicit plan, read from a plan file or
built from options, on a cluster with its measured power fits (unless ``analytical``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hetplan import graph
from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.plan.stamp import check_cluster, stamped
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import DATASET_SIZES, Prediction, plan_from_options, predict
from hetplan.predict.build import plan_shape
from hetplan.predict.error_bars import ErrorModel, with_interval
from hetplan.profile.power_store import with_power_fits
from hetplan.profile.select import compute_model
from hetplan.profile.store import profile_dir
from hetplan.serde import load_file, to_data, write_json_atomic
from hetplan.usecases.feedback import SILENT, Feedback
from hetplan.usecases.pages import write_prediction_page


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """A plan built from options (``predict --strategy ...``) instead of read from a file."""

    strategy: str
    batch: int | None = None
    dp: int | None = None
    pp: int | None = None
    tp: int = 1
    micro_batches: int | None = None
    micro_batch_size: int | None = None
    partition: list[int] | None = None
    devices: list[str] | None = None
    optimizer: str = "sgd"
    sync: str = "bsp"
    staleness: int = 0
    ps_devices: list[str] | None = None
    ps_async: bool = False
    recompute: bool = False
    recompute_mode: str = "all"
    """With ``recompute``: all or except_last (checked as the plan is built)."""
    zero: int | None = None
    """fsdp: the ZeRO stage (None: the plan's default, 3)."""
    shard_stages: bool = False
    """hybrid: FSDP2-sharded stages."""


@dataclass(frozen=True, kw_only=True)
class PredictRequest:
    """One prediction: the plan of ``plan_file``, else the one ``build`` describes for
    ``model``; ``out`` receives the plan (stamped), ``html`` its page."""

    cluster: Path
    model: str | None = None
    plan_file: Path | None = None
    build: PlanOptions | None = None
    dataset: str | None = None
    dtype: str = "fp32"
    dataset_size: int | None = None
    profiles: Path | None = None
    analytical: bool = False
    other_cluster: bool = False
    out: Path | None = None
    html: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Predicted:
    """The prediction, the plan it is of, and the cluster it priced (power fits applied)."""

    prediction: Prediction
    plan: Plan
    cluster: Cluster
    model: ModelRef


def predict_plan(req: PredictRequest, feedback: Feedback = SILENT) -> Predicted:
    """Predict ``req``'s plan and write the files it asks for. Every input that does not need
    the model (cluster, plan file, the options of a plan to build) is checked before it is
    traced: tracing takes seconds."""
    clus = load_cluster(req.cluster)
    plan = None if req.plan_file is None else _plan_file(req, clus)
    if plan is not None:
        ref = plan.model
    elif req.model is None or req.build is None:
        raise InputError("give --plan FILE, or --model and --strategy to build a plan")
    else:
        ref = ModelRef(name=req.model, dataset=req.dataset, dtype=req.dtype)
        _check_build(req.build, clus)
    if not req.analytical:
        clus, _ = with_power_fits(clus, req.profiles)
    compute = compute_model(ref.dtype, directory=req.profiles, measured=not req.analytical)
    with feedback.phase(f"tracing {ref.name}"):
        model = graph.build_graph(ref)
    if plan is None:
        assert req.build is not None
        plan = _built(req.build, model, clus, ref, compute)
    size = req.dataset_size
    if size is None:
        size = DATASET_SIZES.get(ref.dataset or "")
    with feedback.phase("simulating the plan"):
        pred = predict(plan, model, clus, compute, dataset_size=size)
    pred = with_interval(pred, ErrorModel.load(profile_dir(req.profiles)))
    _write(req, plan, clus, pred, ref)
    return Predicted(prediction=pred, plan=plan, cluster=clus, model=ref)


def _plan_file(req: PredictRequest, clus: Cluster) -> Plan:
    """The plan of ``--plan``, checked against ``--model`` and the cluster."""
    assert req.plan_file is not None
    plan = load_file(Plan, req.plan_file)
    if not req.other_cluster:
        check_cluster(plan, clus, where=str(req.plan_file), option="--other-cluster")
    if req.model is not None and req.model != plan.model.name:
        raise InputError(f"--model {req.model!r} differs from the plan's model {plan.model.name!r}")
    return plan


def _check_build(b: PlanOptions, clus: Cluster) -> None:
    """The options of the plan to build, checked against the cluster (strategy, counts,
    device ids, their number); what needs the model's layers is checked as it is built."""
    plan_shape(
        clus, strategy=b.strategy, batch=b.batch, dp=b.dp, pp=b.pp, tp=b.tp,
        micro_batches=b.micro_batches, micro_batch_size=b.micro_batch_size,
        partition=b.partition, devices=b.devices, ps_devices=b.ps_devices,
    )  # fmt: skip


def _built(
    b: PlanOptions, model: ModelGraph, clus: Cluster, ref: ModelRef, compute: ComputeModel
) -> Plan:
    """The plan ``b`` describes (checked as it is built)."""
    return plan_from_options(
        model, clus, model=ref, strategy=b.strategy, batch=b.batch, dp=b.dp, pp=b.pp, tp=b.tp,
        micro_batches=b.micro_batches, micro_batch_size=b.micro_batch_size,
        partition=b.partition, devices=b.devices, optimizer=b.optimizer, compute=compute,
        sync=b.sync, staleness=b.staleness, ps_devices=b.ps_devices, ps_async=b.ps_async,
        recompute=b.recompute, recompute_mode=b.recompute_mode, zero=b.zero,
        shard_stages=b.shard_stages,
    )  # fmt: skip


def _write(req: PredictRequest, plan: Plan, clus: Cluster, pred: Prediction, ref: ModelRef) -> None:
    """The plan file and the page, where asked for."""
    if req.out is not None:
        write_json_atomic(req.out, to_data(stamped(plan, clus)))
    if req.html is not None:
        title = f"{ref.name}: {pred.strategy} on {clus.name}"
        write_prediction_page(req.html, pred, title=title)
