"""Profile a named model (zoo, ``file.py:fn``, ``pkg.mod:fn``) on a local device."""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import torch

from hetplan.cluster.catalog import DEVICE_CATALOG
from hetplan.errors import InputError, SettingError
from hetplan.graph.data import build_module, loss_function, synthetic_batch
from hetplan.graph.extract import DTYPES, build_graph
from hetplan.graph.resolve import resolve_model
from hetplan.profile.layers import (
    LossFn,
    StepSettings,
    fit_layers,
    fit_step,
    inplace_layers,
    measure_batches,
)
from hetplan.profile.provenance import PROFILED, stats_spread
from hetplan.profile.timing import device_name, thread_scope
from hetplan.profile.types import BatchTiming, Profile, Provenance

CPU_TYPE = "cpu"
"""Catalog type of one CPU core: a CPU profile is filed under it unless told otherwise."""


@dataclass(frozen=True, kw_only=True)
class ProfileRequest:
    """What to profile and how."""

    model: str
    dataset: str | None = None
    batch: int = 16
    """Largest batch; the default batch set is ``1, batch // 2, batch``."""
    batch_sizes: tuple[int, ...] | None = None
    """Explicit batch set (e.g. the micro-batch sizes the planner will ask for)."""
    device: str = "cpu"
    """torch device string: ``cpu`` or ``cuda:N``."""
    device_type: str | None = None
    """Catalog type to file the profile under; default: ``cpu``, or guessed from the GPU name."""
    dtype: str = "fp32"
    depth: int | None = None
    """Layer depth; default: the model's (the same layers the planner partitions)."""
    threads: int | None = None
    """Intra-op threads (``torch.set_num_threads``); None keeps the current setting."""
    cpus: tuple[int, ...] | None = None
    """CPU cores to pin the process to while profiling."""
    warmup: int = 3
    steps: int = 10
    optimizer: str = "sgd"
    """sgd, momentum, adam or none (see :class:`~hetplan.profile.layers.StepSettings`)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise SettingError(f"batch must be >= 1 (got {self.batch})")
        if self.threads is not None and self.threads < 1:
            raise SettingError(f"threads must be >= 1 (got {self.threads})")

    @property
    def sizes(self) -> tuple[int, ...]:
        if self.batch_sizes:
            return tuple(sorted(set(self.batch_sizes)))
        return tuple(sorted({1, max(self.batch // 2, 1), self.batch}))


def torch_device(spec: str) -> torch.device:
    """Parse and check ``spec`` (``cpu``, ``cuda``, ``cuda:N``)."""
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise InputError(f"--device {spec!r}: expected cpu or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device {spec!r}: CUDA is not available on this machine")
        index = dev.index or 0
        if index >= torch.cuda.device_count():
            n = torch.cuda.device_count()
            raise InputError(f"--device {spec!r}: only {n} CUDA device(s) here")
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise InputError(f"--device {spec!r}: expected cpu or cuda:N")
    return dev


def guess_device_type(name: str) -> str | None:
    """The catalog type whose name parts all occur in a GPU name as torch reports it
    (``NVIDIA A100-SXM4-40GB`` -> ``A100-40GB``, ``NVIDIA H100 80GB HBM3`` -> ``H100-SXM``);
    the longest match wins; None if none matches."""
    words = re.findall(r"[A-Z0-9]+", name.upper())
    words += [a + b for a, b in itertools.pairwise(words)]  # "TITAN RTX", "RTX 3090"
    hits = [t for t in DEVICE_CATALOG if all(_has(words, p.upper()) for p in t.split("-"))]
    return max(hits, key=len) if hits else None


SOCKET_FORM = "SXM"
"""NVIDIA names the PCIe and NVL boards (``NVIDIA H100 PCIe``, ``NVIDIA H100 NVL``) but not
always the SXM one (``NVIDIA H100 80GB HBM3`` is the SXM5 board): a name without another form
factor is SXM."""
OTHER_FORMS = ("PCIE", "NVL")


def _has(words: list[str], part: str) -> bool:
    """``part`` is a word of the name, or a word plus a generation number (SXM -> SXM4)."""
    if any(w == part or (w.startswith(part) and w[len(part) :].isdigit()) for w in words):
        return part[-1].isalpha() or any(w == part for w in words)
    if part == SOCKET_FORM:
        return not any(w.startswith(OTHER_FORMS) for w in words)
    return False


def device_type_for(named: str | None, dev: torch.device) -> str:
    """The device type to file a measurement of ``dev`` under: ``named``, else ``cpu``, else
    the catalog type the GPU's name matches."""
    return _device_type(named, dev, device_name(dev))


def _device_type(named: str | None, dev: torch.device, hw_name: str) -> str:
    if named:
        return named
    if dev.type == "cpu":
        return CPU_TYPE
    guess = guess_device_type(hw_name)
    if guess is None:
        raise InputError(f"GPU {hw_name!r} matches no catalog device type; name one with --type")
    return guess


def profile_model(req: ProfileRequest) -> Profile:
    """Measure every layer of ``req.model`` at each batch size and fit ``a + k*b`` per layer."""
    if req.dtype not in DTYPES:
        raise InputError(f"dtype {req.dtype!r}: expected one of {', '.join(DTYPES)}")
    dev = torch_device(req.device)
    built = resolve_model(req.model, req.dataset)
    graph = build_graph(built, depth=req.depth, dtype=req.dtype)
    names = [layer.name for layer in graph.layers]
    # Mixed precision as the runtime trains: fp32 weights and inputs, autocast in the forward.
    mixed = DTYPES[req.dtype] if req.dtype != "fp32" else None
    module = build_module(built, dev, req.seed)
    loss = loss_function(built)

    def make_batch(b: int) -> tuple[Any, LossFn]:
        inputs, targets = synthetic_batch(built, b, dev, req.seed)
        return inputs, lambda out: loss(out, targets)

    settings = StepSettings(
        warmup=req.warmup, steps=req.steps, optimizer=req.optimizer, autocast=mixed
    )
    hw_name = device_name(dev)
    with thread_scope(req.threads, req.cpus) as threads:
        timings = measure_batches(
            module, make_batch, names, req.sizes, device=dev, settings=settings
        )
    when = datetime.now(UTC).isoformat(timespec="seconds")
    timings = [_with_provenance(t, when, req.steps) for t in timings]
    fits = fit_layers(timings)
    notes = list(graph.notes)
    if inplace := inplace_layers(module, names):
        notes.append(f"in-place ops in {', '.join(inplace)}: timed at layer boundaries")
    return Profile(
        device_type=_device_type(req.device_type, dev, hw_name),
        device_name=hw_name,
        device=str(dev),
        model=graph.name,
        dataset=built.dataset,
        input_shape=tuple(graph.input_shape),
        dtype=req.dtype,
        threads=threads,
        cpus=req.cpus,
        warmup=req.warmup,
        steps=req.steps,
        optimizer=req.optimizer,
        batch_sizes=req.sizes,
        batches=tuple(timings),
        fits=tuple(fits),
        step_fit=fit_step(timings),
        timestamp=when,
        torch_version=str(torch.__version__),
        notes=tuple(notes),
        source=PROFILED,
    )


def _with_provenance(batch: BatchTiming, when: str, steps: int) -> BatchTiming:
    spread = stats_spread(batch.step)
    return dataclasses.replace(batch, provenance=Provenance(when=when, steps=steps, spread=spread))
