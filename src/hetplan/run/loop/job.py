"""The contract between ``hetplan train`` and its ranks: what each rank is given, what it returns.

:class:`TrainJob` is pickled once by :func:`hetplan.run.train.run_plan` (or ``run_node``) and
handed to :func:`hetplan.run.loop.worker.train_rank` in every rank; :class:`RankResult` comes back
from every rank. Both are frozen, keyword-only dataclasses, so that a field missing or unknown
is a TypeError where the object is built (in the caller, not in a rank), and every reader's
use of a field is checked by mypy. Defaults are a plain run's: a test or entry may leave them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the launcher's agent and the CLI import this module without torch
    import torch

    from hetplan.graph.tp_units import TpLayout
    from hetplan.planspec import Plan
    from hetplan.planspec.trace import Span
    from hetplan.run.loop.trial import StopRule
    from hetplan.run.setup.model import ModelSource

COLLECTIVE_TIMEOUT_S = 300.0  # seconds a collective may wait before failing the run


@dataclass(frozen=True, kw_only=True)
class TrainJob:
    """What every rank of a training run is given (the same on every rank and node)."""

    plan: Plan
    source: ModelSource
    """Where the model comes from (every rank builds its own part of it)."""
    seed: int = 0
    steps: int = 1
    """Timed steps, after :attr:`warmup` (every one a training step)."""
    warmup: int = 0
    data: str | None = None
    """Data function reference (``file.py:fn`` / ``pkg.mod:fn``); None: synthetic batches."""
    resume: Path | None = None
    """Checkpoint folder to start from (already resolved from a directory of them)."""
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 0
    """Steps between checkpoints (0: only at the end; none without :attr:`checkpoint_dir`)."""
    log_dir: Path | None = None
    """Where each rank writes its per-step JSON lines; the only per-node field (a node's own
    folder), left out when nodes compare their jobs."""
    trial: StopRule | None = None
    """Stop early by this rule (``hetplan tune``'s trials)."""
    lr: float | None = None
    """Learning rate (None: the optimizer's default)."""
    return_grads: bool = False
    """Return the step-0 gradients (:attr:`RankResult.grads`), for correctness tests."""
    tp_layout: TpLayout | None = None
    """The tensor-parallel layout, found once by the caller; needed when ``plan.tp > 1``."""
    p2p_via_host: bool = False
    """Send point-to-point tensors through host memory even where the backend need not."""
    collective_timeout_s: float = COLLECTIVE_TIMEOUT_S

    def __post_init__(self) -> None:
        """A tensor-parallel plan's layout is found once, by the caller: no rank can go on
        without it."""
        if self.plan.tp > 1 and self.tp_layout is None:
            raise TypeError(f"TrainJob: the plan has tp = {self.plan.tp} but no tp_layout")


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """What one rank measured (lists: one entry per step run, warm-up first). The defaults are
    what readers assume of a rank that did not say (a hand-made result in a test)."""

    rank: int
    device: str
    """The plan's device id of this rank."""
    pipeline: int
    stage: int
    """The rank's stage; -1 for a parameter-server rank that is no worker."""
    step_s: list[float]
    forward_s: list[float]
    backward_s: list[float]
    optimizer_s: list[float]
    loss: list[float | None]
    """The stage's loss (None where this rank computes none: not the last stage, a tp shard)."""
    peak_memory_bytes: int
    """Counted on the first step."""
    memory_source: str
    device_kind: str = ""
    """``cpu`` or ``cuda:<k>``."""
    host: str | None = None
    """Ranks of one host share one ``perf_counter`` clock (spans are aligned per host)."""
    actions: list[Span] = field(default_factory=list)
    """The last step's spans (absolute ``perf_counter`` seconds)."""
    timing: str = "host clock"
    """How the spans were timed: ``cuda events`` or ``host clock``."""
    last_step_start: float = 0.0
    last_step_end: float | None = None
    held_state_bytes: int = 0
    """Parameters and buffers this rank materialised."""
    optimizer_state_bytes: int = 0
    """Bytes of the optimizer state this rank holds at the end (its owned parameters' under
    ZeRO-1 or a parameter server)."""
    first_step: int = 0
    """Global index of the first step (a resumed run starts at its checkpoint's)."""
    energy_source: str | None = None
    """The meter this rank read (``nvml``, ``rapl``), None without one."""
    energy_note: str = ""
    """Why there is no meter, where there is none."""
    energy_window: tuple[float, float, int] | None = None
    """Joules, wall seconds and timed steps of the metered window (None: not metered)."""
    power_limit_w: float | None = None
    checkpoint: str | None = None
    """The checkpoint this rank's run wrote last (on the ranks that write its files)."""
    stopped: str | None = None
    """Why a trial stopped before its last step (None: it ran every step)."""
    grads: dict[str, torch.Tensor] | None = None
    """Step-0 gradients by canonical parameter name (:attr:`TrainJob.return_grads` only)."""
    ps_pulled: list[dict[int, int]] = field(default_factory=list)
    """Asynchronous parameter server: per iteration, host -> weight version it ran on."""
    ps_applied: list[tuple[int, int]] = field(default_factory=list)
    """Asynchronous parameter server: (worker, iteration) of each push this host applied."""
