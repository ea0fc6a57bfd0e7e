"""What each rank runs: build its part of the model, train ``warmup + steps`` steps, time them.

``train_rank(ctx, job)`` is the entry of :func:`hetplan.run.launch.spawn.launch_local`;
``train_and_gather`` that of a run over several nodes
(:func:`hetplan.run.launch.spawn.launch_node`),
which collects every rank's result on rank 0. The job and the result are the typed contract of
:mod:`hetplan.run.loop.job`.
"""

from __future__ import annotations

import functools
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from hetplan.graph.tp_units import TpLayout
from hetplan.planspec import Plan
from hetplan.planspec.strategies import ExecutorKind, spec_of
from hetplan.planspec.trace import Span
from hetplan.run.execute import p2p
from hetplan.run.execute.executor import Executor
from hetplan.run.execute.ps import PsExecutor, ServerExecutor, hosted_params
from hetplan.run.execute.ps_async import AsyncPsExecutor, AsyncServer
from hetplan.run.execute.window import WindowExecutor
from hetplan.run.launch.spawn import RankContext
from hetplan.run.loop.job import RankResult, TrainJob
from hetplan.run.loop.rank_setup import (
    Groups,
    RankSetup,
    bucket_sync,
    exchange_templates,
    setup_rank,
    setup_server,
    wave_sync,
)
from hetplan.run.loop.rank_warnings import captured_warnings
from hetplan.run.loop.steplog import StepLogWriter
from hetplan.run.loop.trial import StopRule
from hetplan.run.meters.energy import EnergyMeter, meter_for, power_limit_w
from hetplan.run.meters.step_memory import measure_step_memory
from hetplan.run.setup.checkpoint import (
    CheckpointInfo,
    load_checkpoint,
    save_checkpoint,
    step_seed,
)
from hetplan.run.setup.data import DatasetFeed, Feed, canonical_ref, make_feed
from hetplan.run.setup.layout import RankRole, rank_roles, run_devices, server_role
from hetplan.run.setup.optimizers import make_optimizer, state_bytes, zero_optimizer
from hetplan.run.setup.precision import LossScaler

# Steps of a windowed (PipeDream, WSP) plan between a trial's stop decisions: the pipeline
# drains at each, so a trial pays one fill and drain per window (the stop rule's minimum is 3).
TRIAL_WINDOW_STEPS = 5  # steps


def train_rank(ctx: RankContext, job: TrainJob) -> RankResult:
    """Run this rank's part of ``job.plan``; return its timings (and step-0 grads). Its
    warnings go to the run's log folder, where the command shows them."""
    with captured_warnings(job.log_dir, ctx.rank):
        return _train_rank(ctx, job)


def _train_rank(ctx: RankContext, job: TrainJob) -> RankResult:
    plan, source, seed = job.plan, job.source, job.seed
    roles = rank_roles(plan)
    ranks = len(run_devices(plan))
    if ranks != ctx.world_size:
        raise RuntimeError(f"plan has {ranks} ranks but the world has {ctx.world_size}")
    role = roles[ctx.rank] if ctx.rank < len(roles) else server_role(plan, ctx.rank)
    p2p.configure(ctx.via_host or job.p2p_via_host)
    groups = Groups(plan, ctx.rank, ctx.world_size, job.collective_timeout_s)
    tp = (_tp_layout(job), groups.tp) if plan.tp > 1 else None
    if role.stage < 0:
        setup = setup_server(plan, role, source, seed, ctx.device)
    else:
        shard = groups.stage if spec_of(plan).gathers_weights(plan) else None
        setup = setup_rank(plan, role, source, seed, ctx.device, tp, shard)
    if setup.ties is not None:
        setup.ties.group = groups.ties
    module = setup.module
    trainable = [p for p in module.parameters() if p.requires_grad]
    spec = spec_of(plan)
    hosts = hosted_params(plan, setup.layer_params) if spec.hosts_parameters else {}
    if spec.hosts_parameters:  # the optimizer state lives with the rank's hosted shards
        trainable = hosts.get(ctx.rank) or [nn.Parameter(torch.zeros(0))]  # (none: no state)
    if spec.shards_optimizer_only(plan):  # ZeRO-1: this rank keeps its owned tensors' state
        optimizer = zero_optimizer(plan.optimizer, trainable, job.lr, groups.stage)
    else:
        optimizer = make_optimizer(plan.optimizer, trainable, job.lr)
    start = _resume(job, setup, optimizer, groups, seed)
    seed = start.seed  # a resumed run keeps its data order and random streams
    feed = make_feed(
        plan,
        source,
        data=job.data,
        seed=seed,
        start_step=start.step,
        start_position=start.position,
    )
    dtype = plan.model.dtype
    micro = role.batch // plan.micro_batches
    sample = None
    if role.stage == 0:
        sample = feed.batch(start.step, role.pipeline, ctx.device)[0][:micro]
    io = setup.io if role.stage < 0 else exchange_templates(setup, sample, ctx.device, dtype)
    scaler = LossScaler(dtype == "fp16", groups.world)
    scaler.scale = start.loss_scale if scaler.enabled else 1.0
    common: dict[str, Any] = {
        "module": module,
        "io": io,
        "device": ctx.device,
        "micro_batches": plan.micro_batches,
        "global_batch": plan.global_batch,
        "loss_fn": feed.loss,
        "dtype": dtype,
        "optimizer": optimizer,
        "ties": setup.ties,
        "scaler": scaler,
        "recompute": plan.recompute,
        "recompute_last": plan.recompute_mode == "all",
        "sharded_logits": setup.sharded_logits,
    }
    build = _Build(plan, job, ctx, role, setup, groups, feed, hosts, common)
    executor = EXECUTORS[spec.executor(plan)](build)
    loop = _Loop(ctx, job, role, setup, groups, feed, executor, start)
    return loop.run()


def _tp_layout(job: TrainJob) -> TpLayout:
    """The job's tensor-parallel layout (:class:`TrainJob` requires one when ``tp > 1``)."""
    assert job.tp_layout is not None
    return job.tp_layout


@dataclass(frozen=True)
class _Build:
    """What every executor factory may need (one rank, after its set-up)."""

    plan: Plan
    job: TrainJob
    ctx: RankContext
    role: RankRole
    setup: RankSetup
    groups: Groups
    feed: Feed
    hosts: dict[int, list[nn.Parameter]]
    common: dict[str, Any]


def _flushed(b: _Build) -> Executor:
    executor = Executor(actions=b.setup.actions, **b.common)
    executor.sync = bucket_sync(b.setup, b.plan, b.groups, executor)
    return executor


def _window(b: _Build) -> Executor:
    window = WindowExecutor(
        window_actions=functools.partial(b.setup.window_actions, b.plan), **b.common
    )
    window.wave = wave_sync(b.setup, b.plan, b.groups, window)
    window.fetch = functools.partial(_read, b.feed, b.role, b.ctx.device)
    return window


def _ps(b: _Build) -> Executor:
    kind = ServerExecutor if b.role.stage < 0 else PsExecutor  # a server-only rank, or a worker
    return kind(
        hosts=b.hosts, rank=b.ctx.rank, group=b.groups.world, actions=b.setup.actions, **b.common
    )


def _async_ps(b: _Build) -> Executor:
    assert b.groups.ps is not None
    plan, rank, hosts = b.plan, b.ctx.rank, b.hosts
    server = None
    if rank in hosts:
        server = AsyncServer(
            rank=rank,
            workers=list(range(len(rank_roles(plan)))),
            params=hosts[rank],
            make_optimizer=lambda ps: make_optimizer(plan.optimizer, ps, b.job.lr),
            staleness=plan.staleness,
            groups=b.groups.ps,
        )
    return AsyncPsExecutor(
        hosts=hosts, rank=rank, groups=b.groups.ps, server=server, actions=b.setup.actions,
        worker=rank < len(rank_roles(plan)), **b.common,
    )  # fmt: skip


def _sharded(b: _Build) -> Executor:
    """A replica of a sharded model: FSDP2's hooks gather and scatter inside its forward and
    backward actions (no gradient buckets)."""
    return Executor(actions=b.setup.actions, **b.common)


EXECUTORS: dict[ExecutorKind, Callable[[_Build], Executor]] = {
    "flushed": _flushed,
    "window": _window,
    "ps": _ps,
    "ps-async": _async_ps,
    "fsdp": _sharded,
}
"""The executor of each kind (:meth:`hetplan.planspec.strategies.StrategySpec.executor`)."""


def _read(
    feed: Feed, role: RankRole, device: str, step: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The pipeline's batch of ``step`` on the stages that read data (the first and last)."""
    if role.stage == 0 or role.stage == role.num_stages - 1:
        return feed.batch(step, role.pipeline, device)
    return None, None


def _resume(
    job: TrainJob,
    setup: RankSetup,
    optimizer: torch.optim.Optimizer,
    groups: Groups,
    seed: int,
) -> CheckpointInfo:
    """The state to start from: the checkpoint ``job.resume`` loaded, or step 0."""
    plan = job.plan
    if job.resume is None:
        return CheckpointInfo(
            step=0, position=0, seed=seed, model=plan.model.name, optimizer=plan.optimizer
        )
    return load_checkpoint(job.resume, setup.module, optimizer, setup.canonical, groups.control)


@dataclass(kw_only=True)
class _Out:
    """What the step loop records as it goes; frozen into a :class:`RankResult` at the end."""

    step_s: list[float] = field(default_factory=list)
    forward_s: list[float] = field(default_factory=list)
    backward_s: list[float] = field(default_factory=list)
    optimizer_s: list[float] = field(default_factory=list)
    loss: list[float | None] = field(default_factory=list)
    actions: list[Span] = field(default_factory=list)
    timing: str = "host clock"
    last_step_start: float = 0.0
    last_step_end: float | None = None
    peak_memory_bytes: int = 0
    memory_source: str = ""
    grads: dict[str, torch.Tensor] | None = None
    energy_window: tuple[float, float, int] | None = None
    power_limit_w: float | None = None
    checkpoint: str | None = None
    stopped: str | None = None


class _Loop:
    """The step loop of one rank: data, timing, memory, energy, logs, checkpoints, stopping."""

    def __init__(
        self,
        ctx: RankContext,
        job: TrainJob,
        role: RankRole,
        setup: RankSetup,
        groups: Groups,
        feed: Feed,
        executor: Executor,
        start: CheckpointInfo,
    ) -> None:
        self.ctx, self.job, self.plan, self.role = ctx, job, job.plan, role
        self.setup, self.groups, self.feed, self.executor = setup, groups, feed, executor
        self.start = start
        self.seed = start.seed
        self.warmup = job.warmup
        self.total = job.steps + self.warmup
        self.rule: StopRule | None = job.trial
        self.ckpt_dir = job.checkpoint_dir
        self.every = job.checkpoint_every
        self.log = StepLogWriter(job.log_dir, ctx.rank) if job.log_dir is not None else None
        self.meter, self.energy_note = _meter(ctx)
        self._energy_start: tuple[float, float, int] | None = None
        self.iterations: list[float] = []
        self.decided = 0  # steps whose times have gone to the stop rule
        self.out = _Out()

    def run(self) -> RankResult:
        role, ex = self.role, self.executor
        last_saved = -1
        for i in range(self.total):
            step = self.start.step + i
            torch.manual_seed(step_seed(self.seed, step, role.pipeline, role.stage))
            if i == self.warmup:
                self._open_window()
            self._step(i, step)
            _record_step(self.out, ex)
            _check_loss(self.out.loss[-1], step, role)
            if i == self.total - 1:  # before the last step's log line and checkpoint
                self._close_window()
            if role.tp_rank:  # the loss is replicated over the stage's shards: count it once
                self.out.loss[-1] = None
            if i == 0 and self.job.return_grads:
                self.out.grads = self._grads()
            self._log(step, i)
            if self.ckpt_dir is not None and self.every and (step + 1) % self.every == 0:
                self._save(step + 1)
                last_saved = step + 1
            if self._should_stop(i):
                break
        self._close_window()  # a trial stopped early; else closed already (a no-op)
        extra = ex.close()
        done = self.start.step + len(self.out.step_s)
        if self.ckpt_dir is not None and last_saved != done:
            self._save(done)
        if self.log is not None:
            self.log.close()
        return self._result(extra)

    def _result(self, extra: dict[str, Any]) -> RankResult:
        """The loop's figures and who this rank is; ``extra``: what the executor reported at
        its close (:class:`RankResult` fields: the asynchronous server's logs)."""
        o, ctx, role = self.out, self.ctx, self.role
        return RankResult(
            rank=ctx.rank, device=role.device, pipeline=role.pipeline, stage=role.stage,
            device_kind=ctx.device,  # cpu or cuda:<k>
            host=socket.gethostname(),  # ranks of one host share one perf_counter clock
            step_s=o.step_s, forward_s=o.forward_s, backward_s=o.backward_s,
            optimizer_s=o.optimizer_s, loss=o.loss, actions=o.actions, timing=o.timing,
            last_step_start=o.last_step_start, last_step_end=o.last_step_end,
            peak_memory_bytes=o.peak_memory_bytes, memory_source=o.memory_source,
            held_state_bytes=self.setup.held_bytes, first_step=self.start.step,
            optimizer_state_bytes=state_bytes(self.executor.optimizer),
            energy_source=self.meter.name if self.meter else None, energy_note=self.energy_note,
            energy_window=o.energy_window, power_limit_w=o.power_limit_w,
            checkpoint=o.checkpoint, stopped=o.stopped, grads=o.grads, **extra,
        )  # fmt: skip

    def _open_window(self) -> None:
        """Open the energy window at the first timed step, the device synchronised: the
        meter is read once here and once after the last timed step (:meth:`_close_window`),
        never per step (counters advance in 10-100 ms updates that per-step reads misplace)."""
        if self.meter is not None:
            _synchronize(self.ctx.device)
            self._energy_start = (self.meter.read_j(), time.perf_counter(), len(self.out.step_s))

    def _close_window(self) -> None:
        """Close the energy window: joules, wall seconds and timed steps it covered."""
        if self.meter is None or self._energy_start is None:
            return
        _synchronize(self.ctx.device)
        j0, t0, n0 = self._energy_start
        self._energy_start = None
        joules, seconds = self.meter.read_j() - j0, time.perf_counter() - t0
        self.out.energy_window = (joules, seconds, len(self.out.step_s) - n0)
        self.out.power_limit_w = power_limit_w(self.meter)

    def _step(self, i: int, step: int) -> None:
        """Run loop step ``i`` (global ``step``); the first one counts memory."""
        ex = self.executor
        x, y = None, None
        if isinstance(ex, WindowExecutor):
            if ex.window_done:
                ex.begin_window(step, self._window(i))
        else:
            x, y = _read(self.feed, self.role, self.ctx.device, step)
        if i == 0:  # memory is counted on the first step (counting slows it down)
            self.out.peak_memory_bytes, self.out.memory_source = measure_step_memory(
                self.ctx.device, functools.partial(ex.step, x, y), ex.module, ex.optimizer
            )
        else:
            ex.step(x, y)

    def _window(self, i: int) -> int:
        """Steps of the window starting at loop step ``i``: up to the next checkpoint, the
        next trial decision or the end, where the pipeline must be drained."""
        n = self.total - i
        if self.ckpt_dir is not None and self.every:
            n = min(n, self.every - (self.start.step + i) % self.every)
        if self.rule is not None:
            n = min(n, TRIAL_WINDOW_STEPS)
        return n

    def _grads(self) -> dict[str, torch.Tensor]:
        module, canonical = self.executor.module, self.setup.canonical
        return {
            canonical.get(name, name): _full(p.grad).detach().cpu().clone()
            for name, p in module.named_parameters()
            if p.grad is not None
        }

    def _log(self, step: int, i: int) -> None:
        if self.log is None:
            return
        last = self.role.stage == self.role.num_stages - 1 and self.role.tp_rank == 0
        self.log.write(
            {
                "step": step,
                "rank": self.ctx.rank,
                "pipeline": self.role.pipeline,
                "stage": self.role.stage,
                "step_s": self.out.step_s[-1],
                "loss": self.out.loss[-1],
                "samples": self.role.batch if last else 0,
                "peak_memory_bytes": self.out.peak_memory_bytes if i == 0 else None,
                "energy_j": None,  # metered over the timed window, not per step
                "timed": i >= self.warmup,
            }
        )

    def _save(self, step: int) -> None:
        assert self.ckpt_dir is not None
        feed = self.feed
        position = feed.position(step) if isinstance(feed, DatasetFeed) else 0
        info = CheckpointInfo(
            step=step,
            position=position,
            seed=self.seed,
            model=canonical_ref(self.plan.model.name) or self.plan.model.name,
            optimizer=self.plan.optimizer,
            loss_scale=self.executor.scaler.scale,
            data=canonical_ref(self.job.data),
            strategy=self.plan.strategy,
            global_batch=self.plan.global_batch,
        )
        ex = self.executor
        path = save_checkpoint(
            self.ckpt_dir, info, ex.module, ex.optimizer, self.setup.canonical, self.groups.control
        )
        if path is not None:
            self.out.checkpoint = str(path)

    def _should_stop(self, i: int) -> bool:
        """Trials only: the shared iteration time (slowest rank) decides, on every rank."""
        if self.rule is None:
            return False
        ex = self.executor
        if isinstance(ex, WindowExecutor) and not ex.window_done:
            return False  # a windowed plan stops only where its pipeline is drained
        k = len(self.out.step_s) - self.decided
        self.decided += k
        t = torch.tensor(self.out.step_s[-k:], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.groups.control)
        first = i - k + 1
        self.iterations += [float(v) for n, v in enumerate(t) if first + n >= self.warmup]
        why = self.rule.decide(self.iterations)
        if why is not None:
            self.out.stopped = why
        return why is not None


class NonFiniteLossError(RuntimeError):
    """The loss of a step is NaN or infinite: the run stops before it checkpoints the state
    that step left (the last checkpoint written is the last good one)."""


def _check_loss(loss: float | None, step: int, role: RankRole) -> None:
    if loss is not None and not math.isfinite(loss):
        raise NonFiniteLossError(
            f"loss is {loss} at step {step} (pipeline {role.pipeline}): the data holds NaN or "
            "infinite values, or the training diverged (a lower --lr?)"
        )


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a tensor-parallel shard gathered over its group: collective)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _meter(ctx: RankContext) -> tuple[EnergyMeter | None, str]:
    """This rank's energy meter: its GPU's (NVML); on CPUs the node's packages (RAPL), read by
    local rank 0 only, since a package's counter covers every rank on it."""
    if ctx.device == "cpu" and ctx.local_rank != 0:
        return None, "RAPL counts the whole CPU package: read by local rank 0"
    return meter_for(ctx.device)


def _record_step(out: _Out, executor: Executor) -> None:
    """Step figures from the executed trace: compute seconds per kind, and the step's span."""
    trace = executor.trace

    def total(kind: str) -> float:
        return sum(s.duration for s in trace if s.kind == kind)

    out.step_s.append(executor.step_end - executor.step_start)
    out.forward_s.append(total("fwd"))
    out.backward_s.append(total("bwd"))
    out.optimizer_s.append(total("optimizer"))
    out.loss.append(executor.last_loss)
    # The last step's spans (absolute perf_counter seconds, device time on CUDA; aligned
    # across ranks in :func:`hetplan.run.measurement.measure.summarize`: one host, one monotonic
    # clock).
    out.actions = list(trace)
    out.last_step_start = executor.step_start
    out.last_step_end = executor.step_end
    out.timing = executor.clock.source


def train_and_gather(ctx: RankContext, job: TrainJob) -> list[RankResult] | None:
    """``train_rank``, then every rank's result gathered on rank 0 (None elsewhere)."""
    result = train_rank(ctx, job)
    gathered: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    return gathered
