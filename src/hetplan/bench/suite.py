"""What the suite runs: zoo models sized for a 2-core machine x local clusters x strategies.

Each model's batch keeps one training step under about a second on one core (measured with
``hetplan profile`` on the development machine), so that the full suite fits in an hour and
the quick one in 20-25 minutes (fewer models, fewer steps; three rounds each).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hetplan.errors import InputError
from hetplan.planspec.strategies import ASYNC_VARIANTS as _VARIANTS
from hetplan.planspec.strategies import ASYNCHRONOUS_FAMILIES, FLUSHED_PIPELINE, RUNNABLE

HOMOGENEOUS_2 = "local-cpu"
HOMOGENEOUS_4 = "local-cpu-4on2"
HETEROGENEOUS = "local-cpu-hetero"
"""Speeds 1 : 1/2 : 1/2 by CPU pinning (one process alone on a core, two sharing another)."""
CLUSTERS = (HOMOGENEOUS_2, HOMOGENEOUS_4, HETEROGENEOUS)
PIPELINES = FLUSHED_PIPELINE
"""The synchronous single pipelines (gpipe, 1f1b), compared with each other in the report."""
HYBRID_MIN_RANKS = 4
"""Hybrid (2 pipelines x 2 stages) needs 4 ranks."""
EXECUTABLE_FAMILIES = RUNNABLE
"""The families the runtime executes, each run as a fixed case."""
PLANNER_FAMILIES = tuple(f for f in RUNNABLE if f not in ASYNCHRONOUS_FAMILIES)
"""The planner's families: what ``hetplan plan`` searches by default (synchronous only,
issue 27), so the suite measures the pick a user gets."""
ASYNC_VARIANTS = tuple(_VARIANTS)
"""Run as fixed strategies, since the planner does not propose them: an asynchronous
parameter server and HetPipe's wave-synchronous hybrid, both with bound ``SUITE_STALENESS``."""
BENCH_STRATEGIES = (*EXECUTABLE_FAMILIES, *ASYNC_VARIANTS, "zero1", "hybrid-fsdp", "tp")
TP_DEGREE = 2
"""The fixed tensor-parallel case: data parallel over groups of ``TP_DEGREE`` devices."""
TP_MIN_RANKS = 2 * TP_DEGREE
SUITE_STALENESS = 1  # iterations (ps-async) / waves (wsp)
MICRO_BATCHES_PER_STAGE = 2
"""Micro-batches per pipeline stage of the fixed strategies: enough to fill a 2-4 stage
pipeline (bubble (S-1)/(m+S-1) <= 43%) while keeping micro-batches large enough that
per-micro-batch framework overhead does not dominate on a CPU core."""


@dataclass(frozen=True, kw_only=True)
class BenchModel:
    """A zoo model, its dataset preset and the global batch the suite trains it with."""

    name: str
    dataset: str | None
    batch: int

    @property
    def key(self) -> str:
        return f"{self.name}/{self.dataset}" if self.dataset else self.name


# One step at these batches on one core of the development machine (fwd + bwd, 1 thread):
# resnet-tiny 0.05 s, vgg11 0.4 s, mobilenetv2 0.4 s, gpt-tiny b32 ~0.25 s, resnet18 b8 0.7 s.
RESNET_TINY = BenchModel(name="resnet-tiny", dataset="cifar10", batch=32)
VGG11 = BenchModel(name="vgg11", dataset="cifar10", batch=16)
MOBILENET = BenchModel(name="mobilenetv2", dataset="cifar10", batch=16)
GPT_TINY = BenchModel(name="gpt-tiny", dataset=None, batch=32)
RESNET18 = BenchModel(name="resnet18", dataset="cifar10", batch=8)


@dataclass(frozen=True, kw_only=True)
class SuiteConfig:
    models: tuple[BenchModel, ...]
    clusters: tuple[str, ...] = CLUSTERS
    steps: int = 10
    warmup: int = 3
    profile_steps: int = 10
    rounds: int = 3
    """Times each plan is measured, the rounds interleaved (:mod:`hetplan.bench.rounds`): the
    median of three drops one disturbed round."""
    cluster_dir: Path | None = None
    """Folder of the cluster files; default: the repository's ``examples/clusters``."""
    only: tuple[str, ...] | None = None
    """Run only these strategies (dp, gpipe, 1f1b, hybrid, planner); None: all."""


QUICK = SuiteConfig(models=(RESNET_TINY, VGG11), steps=5, warmup=2, profile_steps=5)
FULL = SuiteConfig(models=(RESNET_TINY, VGG11, MOBILENET, GPT_TINY, RESNET18), steps=10)
ALL_MODELS = {m.name: m for m in FULL.models}


def select_models(names: list[str]) -> tuple[BenchModel, ...]:
    """The suite models named (``name`` or ``name:batch``); InputError for an unknown one."""
    out = []
    for text in names:
        name, _, batch = text.partition(":")
        if name not in ALL_MODELS:
            known = ", ".join(ALL_MODELS)
            raise InputError(f"--models: unknown suite model {name!r}; expected one of {known}")
        model = ALL_MODELS[name]
        if batch:
            if not batch.isdigit() or int(batch) < 1:
                raise InputError(f"--models: batch of {name!r} must be a positive integer")
            model = BenchModel(name=model.name, dataset=model.dataset, batch=int(batch))
        out.append(model)
    return tuple(out)


def default_cluster_dir() -> Path:
    """The repository's ``examples/clusters`` (an editable install), else InputError."""
    root = Path(__file__).resolve().parents[3]
    path = root / "examples" / "clusters"
    if not path.is_dir():
        raise InputError("--clusters: no examples/clusters next to the package; give the folder")
    return path


def cluster_path(name: str, directory: Path | None) -> Path:
    """The file of cluster ``name`` (``local-cpu`` or ``local-cpu.yaml``) in ``directory``."""
    folder = directory or default_cluster_dir()
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    for path in (folder / f"{stem}.yaml", folder / f"{stem}.yml"):
        if path.is_file():
            return path
    known = sorted(p.stem for p in folder.glob("*.y*ml"))
    raise InputError(
        f"--cluster-names: no cluster {name!r} in {folder} (expected {stem}.yaml); "
        f"known: {', '.join(known) or 'none'}"
    )


def strategies(ranks: int, tensor_parallel: bool = False) -> list[str]:
    """Fixed strategies run on a cluster of ``ranks`` (plus the planner's pick);
    ``tensor_parallel``: the model has layers tensor parallelism splits."""
    out = ["dp", "fsdp", "zero1", "ps", "ps-async", *PIPELINES, "pipedream"]
    if ranks >= HYBRID_MIN_RANKS:
        out += ["hybrid", "hybrid-fsdp", "wsp"]
    if tensor_parallel and ranks >= TP_MIN_RANKS:
        out.append("tp")
    return out


def micro_batches(per_pipeline_batch: int, stages: int) -> int:
    """The largest divisor of the pipeline batch up to ``MICRO_BATCHES_PER_STAGE * stages``
    (the runtime exchanges fixed-shape micro-batches) leaving at least 2 samples per
    micro-batch (batch normalisation needs more than one value per channel in training)."""
    target = max(1, min(MICRO_BATCHES_PER_STAGE * stages, per_pipeline_batch // 2))
    return max(d for d in range(1, target + 1) if per_pipeline_batch % d == 0)
