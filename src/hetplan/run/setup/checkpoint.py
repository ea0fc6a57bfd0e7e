"""Checkpoints that any plan can resume: ``torch.distributed.checkpoint`` keyed by the model's
parameter names.

Every rank saves what it holds, under the full model's names (``model/<fqn>`` for parameters
and buffers, ``optim/<fqn>/<state>`` for optimizer state); replicas and tied copies are written
once (DCP keeps one writer per key). A rank of another plan loads the keys its own stage holds,
whatever stages, devices and batch split wrote them: this is what lets training switch plans.
``hetplan.json`` beside the data holds the training position (step, sample position in the
data stream, loss scale). Random state is not saved: every step seeds its own generators from
(seed, step, pipeline, stage) (:func:`step_seed`), so a resumed run draws what an
uninterrupted one would.

Atomic: a checkpoint is written into ``.tmp-step-N`` and renamed to ``step-N`` once every rank's
data and the metadata are on disk; ``latest`` (rewritten atomically) names the newest. A run
killed while writing leaves the previous checkpoint as ``latest``.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.tensor import DTensor

from hetplan.errors import InputError
from hetplan.run.setup.optimizers import local_optimizer
from hetplan.run.setup.precision import INIT_SCALE

LATEST = "latest"
INFO = "hetplan.json"
FORMAT = 1
FAULT_ENV = "HETPLAN_TEST_FAIL_IN_CHECKPOINT"
"""Test hook: rank 0 dies after writing step N's data, before publishing it (``N`` = value)."""


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    """Where training stood when a checkpoint was taken."""

    format: int = FORMAT
    step: int
    """Optimizer steps taken so far (the next step to run)."""
    position: int
    """Samples of the data stream consumed so far."""
    seed: int
    model: str
    optimizer: str
    loss_scale: float = INIT_SCALE
    """fp16's dynamic loss scale (ignored by other dtypes). The default is a fresh start's:
    torch.amp.GradScaler's initial scale. At 1.0 the fp16 backward underflows (GPT-2's
    logit gradients are ~1e-9), and training drifts off what torch.amp trains."""
    data: str | None = None
    strategy: str = ""
    global_batch: int = 0


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def step_seed(seed: int, step: int, pipeline: int, stage: int) -> int:
    """Seed of a rank's random ops (dropout) at ``step``: the same in a resumed run."""
    return ((seed * 1_000_003 + step) * 1_009 + pipeline) * 101 + stage


def find_checkpoint(path: Path) -> Path:
    """The checkpoint ``path`` names: a checkpoint folder, or a directory of them (its
    ``latest``); InputError naming ``path`` otherwise."""
    if (path / INFO).is_file():
        return path
    latest = path / LATEST
    if latest.is_file():
        target = path / latest.read_text().strip()
        if (target / INFO).is_file():
            return target
    complete = sorted(p for p in path.glob("step-*") if (p / INFO).is_file())
    if complete:  # no pointer, or one caught between renames: the newest complete checkpoint
        return complete[-1]
    raise InputError(f"--resume {path}: no checkpoint there (expected {LATEST} or {INFO})")


def check_owned(directory: Path, resume: Path | None, overwrite: bool) -> None:
    """A checkpoint folder belongs to one run. InputError when ``directory`` holds another
    run's checkpoints: a new run would overwrite some of its steps, keep the others and move
    ``latest`` (two runs mixed). The run that resumes from ``directory`` continues it;
    ``overwrite`` lets the caller clear it (:func:`clear_checkpoints`)."""
    try:
        held = find_checkpoint(directory)
    except InputError:
        return  # no checkpoint there
    mine = directory.resolve()
    if overwrite or (resume is not None and mine in (resume.resolve(), resume.resolve().parent)):
        return
    info = read_info(held)
    raise InputError(
        f"--checkpoint {directory}: holds the checkpoints of another run (model {info.model}, "
        f"up to step {info.step}); continue that run with --resume {directory}, write to "
        "another folder, or pass --overwrite-checkpoint to replace them"
    )


def clear_checkpoints(directory: Path) -> None:
    """Remove every checkpoint of ``directory`` (``step-*``, unfinished ``.tmp-step-*``,
    ``latest``); other files stay."""
    for path in [*directory.glob("step-*"), *directory.glob(".tmp-step-*")]:
        shutil.rmtree(path, ignore_errors=True)
    (directory / LATEST).unlink(missing_ok=True)


def read_info(path: Path) -> CheckpointInfo:
    try:
        data = json.loads((path / INFO).read_text())
        return CheckpointInfo(**data)
    except (OSError, ValueError, TypeError) as err:
        raise InputError(f"{path / INFO}: not a hetplan checkpoint ({err})") from None


def _model_state(module: nn.Module, canonical: dict[str, str]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in module.state_dict().items():
        key = f"model/{canonical.get(name, name)}"
        if not t.is_meta and key not in out:
            out[key] = t
    return out


def _slot_like(p: nn.Parameter, meta: TensorStorageMetadata) -> torch.Tensor:
    """An empty optimizer slot to load into: Adam's scalar step on the CPU; a tensor split
    like its (tensor-parallel) parameter, so that DCP reads only this rank's part."""
    if len(meta.size) == 0:
        return torch.empty(meta.size, dtype=meta.properties.dtype, device="cpu")
    if isinstance(p, DTensor) and tuple(meta.size) == tuple(p.shape):
        return torch.empty_like(p, dtype=meta.properties.dtype)
    return torch.empty(meta.size, dtype=meta.properties.dtype, device=p.device)


def _named_params(module: nn.Module, canonical: dict[str, str]) -> list[tuple[str, nn.Parameter]]:
    return [(canonical.get(n, n), p) for n, p in module.named_parameters()]


def _optim_state(
    module: nn.Module, optimizer: torch.optim.Optimizer, canonical: dict[str, str]
) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    state = local_optimizer(optimizer).state
    for name, p in _named_params(module, canonical):
        for k, v in state.get(p, {}).items():
            if v is not None:
                out[f"optim/{name}/{k}"] = v if isinstance(v, torch.Tensor) else torch.tensor(v)
    return out


def save_checkpoint(
    directory: Path,
    info: CheckpointInfo,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    canonical: dict[str, str],
    group: Any = None,
) -> Path | None:
    """Collective: every rank of ``group`` calls it. Returns the published folder on rank 0."""
    distributed = dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    tmp = directory / f".tmp-step-{info.step:08d}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed while writing
        tmp.mkdir(parents=True)
    if distributed:
        dist.barrier(group=group)
    state = _model_state(module, canonical) | _optim_state(module, optimizer, canonical)
    with warnings.catch_warnings():  # DCP warns that a single process saves without a group
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=tmp, process_group=group)
    if rank != 0:
        return None
    if os.environ.get(FAULT_ENV) == str(info.step):
        os._exit(17)  # the test of atomicity: killed after the data, before publishing
    return _publish(directory, tmp, info)


def _publish(directory: Path, tmp: Path, info: CheckpointInfo) -> Path:
    """Rename the written folder into place, then point ``latest`` at it. A step saved again
    (a second run into the same directory) moves the old copy aside first and deletes it only
    once ``latest`` names the new one; :func:`find_checkpoint` falls back to the newest complete
    folder if a crash falls between the two renames."""
    with open(tmp / INFO, "w") as f:
        json.dump(asdict(info), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    final = step_dir(directory, info.step)
    old = directory / f".old-{final.name}"
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    pointer = directory / f".{LATEST}.tmp"
    with open(pointer, "w") as f:
        f.write(final.name + "\n")
        f.flush()
        os.fsync(f.fileno())
    pointer.replace(directory / LATEST)
    _fsync_dir(directory)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync_dir(directory: Path) -> None:
    """Make the renames durable (POSIX: a rename is on disk once its directory is synced)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(
    path: Path,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    canonical: dict[str, str],
    group: Any = None,
) -> CheckpointInfo:
    """Load the state this rank holds from checkpoint folder ``path`` (collective when
    distributed); InputError naming a parameter the checkpoint lacks."""
    info = read_info(path)
    stored = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    state = _model_state(module, canonical)
    missing = [k for k in state if k not in stored]
    if missing:
        raise InputError(
            f"--resume {path}: no {missing[0][len('model/') :]} in the checkpoint "
            f"(it was taken of {info.model}; {len(missing)} tensors missing)"
        )
    for key, t in state.items():
        meta = stored[key]
        if isinstance(meta, TensorStorageMetadata) and tuple(meta.size) != tuple(t.shape):
            raise InputError(
                f"--resume {path}: {key[len('model/') :]} has shape {tuple(meta.size)} in the "
                f"checkpoint, {tuple(t.shape)} in the model (taken of another model?)"
            )
    slots: list[tuple[nn.Parameter, str, str]] = []
    local = local_optimizer(optimizer)
    # Only the parameters this rank's optimizer steps (a parameter server's or ZeRO-1's owned
    # ones): a checkpoint holds every owner's state.
    stepped = {id(p) for group in local.param_groups for p in group["params"]}
    for name, p in _named_params(module, canonical):
        if id(p) not in stepped:
            continue
        prefix = f"optim/{name}/"
        for key, meta in stored.items():
            if key.startswith(prefix) and isinstance(meta, TensorStorageMetadata):
                state[key] = _slot_like(p, meta)
                slots.append((p, key[len(prefix) :], key))
    with warnings.catch_warnings():  # DCP warns that a single process loads without a group
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=path, process_group=group)
    local.state.clear()
    for p, slot, key in slots:
        local.state.setdefault(p, {})[slot] = state[key]
    return info
