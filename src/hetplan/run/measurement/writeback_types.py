"""What the write-back of a run works with (:mod:`hetplan.run.measurement.writeback`) and
reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.cost.threads import device_threads
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import ModelGraph
from hetplan.planspec import Plan
from hetplan.profile.measured import best_profiles, cpu_profile, profile_matches
from hetplan.profile.provenance import WRITTEN_BACK, is_deliberate, source_of
from hetplan.profile.types import Profile


@dataclass(frozen=True, kw_only=True)
class StageSample:
    """One rank's measured stage, per micro-batch at full speed, spread over its layers."""

    device_type: str
    micro_batch: int
    fwd: dict[str, float]
    bwd: dict[str, float]
    loss: tuple[float, float] | None
    """Forward and backward of the loss where the stage computed it and the prediction priced
    it apart from the last layer (a stored profile's loss fit); else None."""


@dataclass(frozen=True, kw_only=True)
class Written:
    """One written-back profile file and what this run put into it."""

    device_type: str
    path: Path
    sizes: tuple[int, ...]
    """Micro-batch sizes this run measured."""
    runs: tuple[int, ...]
    """Runs now merged at each of ``sizes`` (this one included)."""
    steps: int
    spread: float | None
    """p90/p10 of this run's timed iteration times."""
    shadowed: tuple[int, ...]
    """Those of ``sizes`` that a profile measured on purpose prices: there it is not used."""


@dataclass(kw_only=True)
class WriteBack:
    """What was written and why anything was not."""

    written: list[Written] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def run_threads(cluster: Cluster, devices: Sequence[str], kind: str) -> int:
    """The intra-op threads every rank on ``devices`` of CPU type ``kind`` runs with
    (``cost.threads``); 0 (unknown) for a GPU type or ranks with different counts."""
    counts = {device_threads(d) for d in map(cluster.device, devices) if d.type.name == kind}
    only = counts.pop() if len(counts) == 1 else None
    return only if only is not None else 0


@dataclass(frozen=True, kw_only=True)
class WriteBackContext:
    """What every rank's conversion needs: the graph, the store's profiles and speeds."""

    plan: Plan
    cluster: Cluster
    graph: ModelGraph
    compute: ComputeModel
    profiles: tuple[Profile, ...]
    """The store's profiles, as the prediction read them."""
    speeds: Mapping[str, float]
    """Effective speed share of devices that share cores (as the prediction estimated)."""

    def threads(self, kind: str) -> int:
        """The threads this run's ranks on CPU type ``kind`` ran with (0: unknown)."""
        return run_threads(self.cluster, self.plan.devices, kind)

    def priced(self, kind: str, micro_batch: int) -> Profile | None:
        """The single-device profile that priced ``kind`` at ``micro_batch`` as it is (None:
        the analytical model, another type's scaled profile or, on CPU ranks, a profile of
        another thread count scaled to theirs did)."""
        threads = self.threads(kind)
        if threads < 1:
            return best_profiles(self.profiles, self.graph, batch=micro_batch).get(kind)
        hit = cpu_profile(self.profiles, self.graph, kind, threads, micro_batch)
        return hit[0] if hit is not None and hit[1] == threads else None

    def shadowed(self, kind: str, micro_batch: int) -> bool:
        """Whether a profile measured on purpose prices ``kind`` at ``micro_batch``."""
        own = self.priced(kind, micro_batch)
        return own is not None and is_deliberate(own)

    def written_back(self, kind: str) -> Profile | None:
        """The newest written-back profile of ``kind`` for this model (runs merge into it)."""
        mine = [
            p
            for p in self.profiles
            if p.device_type == kind
            and p.tp == 1
            and source_of(p) == WRITTEN_BACK
            and profile_matches(p, self.graph)
        ]
        return max(mine, key=lambda p: p.timestamp, default=None)
