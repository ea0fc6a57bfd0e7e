"""Execute a plan on this machine and measure it: the library behind ``hetplan train``.

Every rank is given a :class:`~hetplan.run.loop.job.TrainJob` and returns a
:class:`~hetplan.run.loop.job.RankResult` (:mod:`hetplan.run.loop.worker`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.graph.split import split_program
from hetplan.graph.tp_units import TpLayout
from hetplan.planspec import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.run.launch.placement import check_local_devices, rank_devices
from hetplan.run.launch.spawn import NodeRun, launch_local, launch_node
from hetplan.run.loop.job import RankResult, TrainJob
from hetplan.run.loop.steplog import StepLogWriter
from hetplan.run.loop.trial import StopRule
from hetplan.run.loop.worker import train_and_gather, train_rank
from hetplan.run.measurement.measure import Measurement, summarize
from hetplan.run.setup.checkpoint import (
    check_owned,
    clear_checkpoints,
    find_checkpoint,
    read_info,
)
from hetplan.run.setup.data import canonical_ref, check_batch_fits
from hetplan.run.setup.layout import check_executable, run_devices
from hetplan.run.setup.model import ModelSource, layer_names, source_for
from hetplan.run.setup.tensor_parallel import layout_for


def check_plan(
    plan: Plan, cluster: Cluster | None, source: ModelSource, *, nodes: bool = False
) -> TpLayout | None:
    """InputError if the plan cannot be executed here (strategy, layers, devices; one node
    unless ``nodes``: a run with one command per node); the tensor-parallel layout if tp > 1
    (found and checked in this process, handed to every rank)."""
    names = layer_names(source, plan.model.depth or 1)
    check_executable(plan, names)
    if plan.num_stages > 1:  # the cut must be possible before any process starts
        split_program(source.build_meta(), [list(st.layers) for st in plan.pipelines[0].stages])
    layout = layout_for(plan, source.build(0, "cpu"), names) if plan.tp > 1 else None
    if cluster is not None:
        _check_devices(plan, cluster, nodes)
    return layout


def _check_devices(plan: Plan, cluster: Cluster, nodes: bool) -> None:
    for dev in run_devices(plan):
        cluster.device(dev)  # InputError for an unknown id
    spans = {cluster.device(d).node for d in run_devices(plan)}
    if len(spans) > 1 and not nodes:
        raise InputError(
            f"the plan spans {len(spans)} nodes ({', '.join(sorted(spans))}); run one command "
            "per node (hetplan train --print-commands prints them)"
        )


@dataclass(frozen=True, kw_only=True)
class Training:
    """What a run does besides executing the plan: its data, where it starts, what it keeps."""

    data: str | None = None
    """Data function (``file.py:fn`` / ``pkg.mod:fn``); None: synthetic batches."""
    resume: Path | None = None
    """Checkpoint folder, or a directory of them (its ``latest``), to start from."""
    checkpoint_dir: Path | None = None
    """Where to write checkpoints (always one at the end of the run)."""
    checkpoint_every: int = 0
    """Also every this many steps (0: only at the end)."""
    log_dir: Path | None = None
    """Where ranks write their per-step JSON lines (:mod:`hetplan.run.loop.steplog`)."""
    trial: StopRule | None = None
    """Stop early by this rule (``hetplan tune``'s trials)."""
    lr: float | None = None
    """Learning rate (None: the optimizer's default, :data:`hetplan.run.loop.worker.SGD_LR` /
    :data:`~hetplan.run.loop.worker.ADAM_LR`)."""
    overwrite_checkpoint: bool = False
    """Replace the checkpoints another run left in :attr:`checkpoint_dir` (else refused)."""


def check_training(plan: Plan, training: Training) -> Path | None:
    """InputError for bad data, resume or checkpoint settings, before any process starts;
    returns the checkpoint folder to resume from."""
    if training.data is not None:
        check_batch_fits(training.data, plan.global_batch)
    ps_async = spec_of(plan).executor(plan) == "ps-async"
    if ps_async and (training.checkpoint_dir or training.resume):
        raise InputError(
            "--checkpoint/--resume: not supported for an asynchronous parameter server yet "
            "(its weights live in the servers, which never pause together)"
        )
    if training.lr is not None and not training.lr > 0:
        raise InputError(f"--lr must be > 0 (got {training.lr:g})")
    if training.checkpoint_every < 0:
        raise InputError(f"--checkpoint-every must be >= 0 (got {training.checkpoint_every})")
    if training.checkpoint_dir is not None:
        _check_writable(training.checkpoint_dir, "--checkpoint")
        check_owned(training.checkpoint_dir, training.resume, training.overwrite_checkpoint)
    if training.resume is None:
        return None
    folder = find_checkpoint(training.resume)
    info = read_info(folder)
    # Model references compared as resolved paths: unet.py:model, ./unet.py:model and its
    # absolute path are one model.
    if canonical_ref(info.model) != canonical_ref(plan.model.name):
        raise InputError(
            f"--resume {training.resume}: the checkpoint is of model {info.model!r}, "
            f"the plan trains {plan.model.name!r}"
        )
    if info.optimizer != plan.optimizer:
        raise InputError(
            f"--resume {training.resume}: the checkpoint's optimizer is {info.optimizer}, "
            f"the plan's {plan.optimizer} (their states differ)"
        )
    if canonical_ref(info.data) != canonical_ref(training.data):
        raise InputError(
            f"--resume {training.resume}: the checkpoint was trained on "
            f"{info.data or 'synthetic data'}, this run on {training.data or 'synthetic data'}"
        )
    return folder


def _clear_if_asked(training: Training) -> None:
    """``--overwrite-checkpoint``: the old run's checkpoints go, after every check passed."""
    if training.overwrite_checkpoint and training.checkpoint_dir is not None:
        clear_checkpoints(training.checkpoint_dir)


def _check_writable(folder: Path, option: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".hetplan-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise InputError(f"{option} {folder}: not a writable directory ({err.strerror})") from None


def run_plan(
    plan: Plan,
    *,
    cluster: Cluster | None = None,
    source: ModelSource | None = None,
    steps: int = 1,
    warmup: int = 0,
    seed: int = 0,
    return_grads: bool = False,
    timeout_s: float = 600.0,
    rdzv_timeout_s: float = 30.0,
    training: Training | None = None,
    on_tick: Callable[[], None] | None = None,
) -> list[RankResult]:
    """Run ``warmup + steps`` steps of ``plan`` (every one a training step; the first
    ``warmup`` are not timed); every rank's raw result, by rank.

    Rank r runs on plan device r (pipeline then stage order), pinned to its ``cpus`` when the
    cluster gives them. ``on_tick`` is called about every 0.2 s while the run goes on.
    """
    src = source if source is not None else source_for(plan.model)
    train = training or Training()
    layout = check_plan(plan, cluster, src)
    if steps < 1 or warmup < 0:
        raise InputError(f"steps ({steps}) must be >= 1 and warmup ({warmup}) >= 0")
    if timeout_s <= 0:
        raise InputError(f"--timeout must be > 0 seconds (got {timeout_s:g})")
    resume = check_training(plan, train)
    _clear_if_asked(train)
    cpus = [cluster.device(d).cpus for d in run_devices(plan)] if cluster is not None else None
    job = _job(plan, src, steps, warmup, seed, train, resume, layout, return_grads)
    devices = None
    if cluster is not None:
        devices = rank_devices(plan, cluster)
        check_local_devices(devices, list(range(len(devices))), _gpus())
    return launch_local(
        train_rank,
        len(run_devices(plan)),
        payload=job,
        cpus=cpus,
        timeout_s=timeout_s,
        rdzv_timeout_s=rdzv_timeout_s,
        on_tick=on_tick,
        devices=devices,
    )


def _gpus() -> int:
    import torch  # noqa: PLC0415

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _job(
    plan: Plan,
    source: ModelSource,
    steps: int,
    warmup: int,
    seed: int,
    train: Training,
    resume: Path | None,
    layout: TpLayout | None,
    return_grads: bool = False,
) -> TrainJob:
    """What every rank is given (:func:`hetplan.run.loop.worker.train_rank`)."""
    return TrainJob(
        plan=plan,
        source=source,
        steps=steps,
        warmup=warmup,
        seed=seed,
        data=train.data,
        resume=resume,
        checkpoint_dir=train.checkpoint_dir,
        checkpoint_every=train.checkpoint_every,
        log_dir=train.log_dir,
        trial=train.trial,
        lr=train.lr,
        return_grads=return_grads,
        tp_layout=layout,
    )


def run_node(
    plan: Plan,
    cluster: Cluster,
    node: NodeRun,
    *,
    steps: int = 1,
    warmup: int = 0,
    seed: int = 0,
    timeout_s: float = 600.0,
    rdzv_timeout_s: float = 300.0,
    training: Training | None = None,
    on_tick: Callable[[], None] | None = None,
) -> list[RankResult] | None:
    """This node's part of a run over several nodes (:mod:`hetplan.run.launch.commands`): every
    rank's raw result, by rank, on the node of rank 0; None on the others.
    ``rdzv_timeout_s`` bounds the wait for the other nodes to start."""
    src = source_for(plan.model)
    train = training or Training()
    layout = check_plan(plan, cluster, src, nodes=True)
    if steps < 1 or warmup < 0:
        raise InputError(f"steps ({steps}) must be >= 1 and warmup ({warmup}) >= 0")
    resume = check_training(plan, train)
    devices = rank_devices(plan, cluster)
    check_local_devices(devices, node.ranks, _gpus())
    if node.is_host:  # the folder is shared by the nodes: cleared once, before any joins
        _clear_if_asked(train)
    values = launch_node(
        train_and_gather,
        node,
        payload=_job(plan, src, steps, warmup, seed, train, resume, layout),
        cpus=[cluster.device(d).cpus for d in run_devices(plan)],
        timeout_s=timeout_s,
        rdzv_timeout_s=rdzv_timeout_s,
        on_tick=on_tick,
        devices=devices,
    )
    return values.get(0)


def measure_plan(
    plan: Plan,
    cluster: Cluster,
    *,
    source: ModelSource | None = None,
    steps: int = 10,
    warmup: int = 3,
    timeout_s: float = 600.0,
    training: Training | None = None,
    on_tick: Callable[[], None] | None = None,
    seed: int = 0,
) -> Measurement:
    """Run ``plan`` on ``cluster``'s local devices and summarise the timed steps."""
    raw = run_plan(
        plan,
        cluster=cluster,
        source=source,
        steps=steps,
        warmup=warmup,
        timeout_s=timeout_s,
        training=training,
        on_tick=on_tick,
        seed=seed,
    )
    return summarize(plan, raw, warmup=warmup, cluster=cluster.name)


def predict_plan(
    plan: Plan, cluster: Cluster, directory: Path | None = None
) -> tuple[Any | None, str]:
    """The predictor's :class:`hetplan.predict.Prediction` of ``plan`` and what it used; (None,
    why) without one. Measured profiles from the profile store (``directory``, default the
    usual one) where they exist, the analytical model otherwise.
    """
    try:  # optional at run time: a missing predictor must not stop a measurement
        from hetplan.graph import build_graph  # noqa: PLC0415
        from hetplan.predict import predict  # noqa: PLC0415
        from hetplan.profile.select import compute_model  # noqa: PLC0415
    except ImportError as err:  # a partial install: measure anyway
        return None, f"predictor not available ({err})"
    graph = build_graph(plan.model)
    pred = predict(plan, graph, cluster, compute_model(plan.model.dtype, directory=directory))
    # What priced the layers, per device type: profiles of another model or device type do
    # not count as measured (the prediction's own account, not the store's size).
    return pred, pred.cost_source


def log_results(directory: Path, raw: list[RankResult], plan: Plan, warmup: int) -> None:
    """Write the step records of the ranks in ``raw`` that did not log into ``directory``
    (the ranks of other nodes, whose logs stayed there): the step log of a run over several
    nodes is complete on the first node."""
    present = {int(p.stem.split("-")[1]) for p in directory.glob("rank-*.jsonl")}
    last = plan.num_stages - 1
    for r in raw:
        if r.rank in present:
            continue
        with StepLogWriter(directory, r.rank) as log:
            for i, step_s in enumerate(r.step_s):
                log.write(
                    {
                        "step": r.first_step + i,
                        "pipeline": r.pipeline,
                        "stage": r.stage,
                        "step_s": step_s,
                        "loss": r.loss[i],
                        "samples": plan.pipelines[r.pipeline].batch if r.stage == last else 0,
                        "peak_memory_bytes": r.peak_memory_bytes if i == 0 else None,
                        "energy_j": None,  # metered over the timed window, not per step
                        "timed": i >= warmup,
                    }
                )
