"""Where a profile's figures came from, also for files written before that was recorded.

New profiles say it themselves (``Profile.source``, ``BatchTiming.provenance``). Older files
are read by what they hold: ``hetplan train`` filed its new profiles under the torch device
``train`` and ``import-profile`` under ``imported``; anything else was ``hetplan profile``'s
(a profile that an older write-back merged sizes into counts as profiled: its base was).
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.profile.fit import Stats, summarize
from hetplan.profile.types import SOURCES, BatchTiming, Profile, Provenance

PROFILED, WRITTEN_BACK, IMPORTED = SOURCES
LEGACY_DEVICE_SOURCES = {"train": WRITTEN_BACK, "imported": IMPORTED}
"""``Profile.device`` of files written before provenance -> their source."""


def source_of(profile: Profile) -> str:
    """``profiled``, ``written-back`` or ``imported`` (inferred for older files)."""
    if profile.source is not None:
        return profile.source
    return LEGACY_DEVICE_SOURCES.get(profile.device, PROFILED)


def is_deliberate(profile: Profile) -> bool:
    """Measured on purpose (profiled or imported), as opposed to written back by a run."""
    return source_of(profile) != WRITTEN_BACK


def stats_spread(stats: Stats) -> float | None:
    """p90 / p10 of one summary; None where the p10 is not positive."""
    if stats.p10_s <= 0:
        return None
    return stats.p90_s / stats.p10_s


def step_spread(step_times: Sequence[float]) -> float | None:
    """p90 / p10 of timed step times (the profile's percentiles); None without positive ones."""
    if not step_times:
        return None
    return stats_spread(summarize(step_times))


def provenance_of(profile: Profile, batch: BatchTiming) -> Provenance:
    """The batch's recorded provenance, or the profile-level figures of an older file: its
    timestamp, its timed steps, and the spread of the batch's whole-step times."""
    if batch.provenance is not None:
        return batch.provenance
    unknown = source_of(profile) == IMPORTED or profile.steps <= 0
    return Provenance(
        when=profile.timestamp,
        steps=max(profile.steps, 0),
        spread=None if unknown else stats_spread(batch.step),
    )
