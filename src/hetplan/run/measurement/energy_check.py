"""Metered energy checked before it is believed: per iteration, in the power fit.

A GPU rank's NVML window gives a mean power; one above the enforced power limit (+5%) or
below the type's rest power cannot be right (on an H100, per-step reads once implied 832 W on
a 700 W part). Such a run's energy is modelled instead, says why with the figures
(``Measurement.energy_invalid``), and gives no point to the power fit.
"""

from __future__ import annotations

from pathlib import Path

from hetplan.cluster.catalog import DEVICE_CATALOG
from hetplan.cluster.spec import Cluster, DeviceType
from hetplan.profile.power_store import rest_power_w
from hetplan.run.measurement.measure import Measurement, RankFigures
from hetplan.run.meters.energy import implausible_power, modelled_energy_j


def with_energy(m: Measurement, cluster: Cluster, directory: Path | None = None) -> Measurement:
    """``m`` with its energy per iteration: as measured by the meters where they covered every
    device and every reading is plausible (:func:`energy_problem`), else modelled from each
    rank's measured busy time by the utilisation power model (the cluster's idle and max
    watts per device type); a rejected reading is named in ``m.energy_invalid``."""
    if m.energy_j_per_iteration is not None:
        problems = [p for r in m.ranks if (p := energy_problem(r, cluster, directory))]
        if not problems:
            return m
        m.energy_invalid = "; ".join(problems)
        m.energy_j_per_iteration = None
    span = m.measured_iteration_s
    if span <= 0:
        return m
    total = 0.0
    for r in m.ranks:
        busy = min(r.forward_s + r.backward_s + r.optimizer_s, span)
        total += modelled_energy_j(cluster.device(r.device).type, busy, span)
    m.energy_j_per_iteration = total
    why = "the metered reading was rejected" if m.energy_invalid else "measured busy time"
    m.energy_source = f"modelled (utilisation power model over {why})"
    return m


CATALOG_IDLE_SHARE = 0.5
"""Without a measured rest power, the floor is this share of the catalog's idle figure: those
are fractions of TDP from posted readings, and an H100 rested at 72.5 W against the catalog's
126 W (issue 24). A fitted idle is no floor: a bad fit (idle 357 W on that H100) would then
reject every good reading and never be corrected."""


def energy_problem(r: RankFigures, cluster: Cluster, directory: Path | None = None) -> str | None:
    """Why a GPU rank's metered energy cannot be right, with its figures; None if it can (or
    the rank read no NVML meter). The limit is the one NVML enforced, else the catalog's
    maximum power; the floor is the rest power measured by ``profile-power``, else a share of
    the catalog's idle figure (:data:`CATALOG_IDLE_SHARE`)."""
    if r.energy_source != "nvml" or r.power_w is None or r.energy_window_s is None:
        return None
    kind = cluster.device(r.device).type
    limit = r.power_limit_w if r.power_limit_w is not None else catalog_max_w(kind)
    floor, what = _floor(kind, directory)
    why = implausible_power(r.power_w, limit_w=limit, idle_w=floor, idle_what=what)
    if why is None:
        return None
    joules = r.power_w * r.energy_window_s
    return f"rank {r.rank} ({r.device}, nvml): {joules:.1f} J over {r.energy_window_s:.3f} s {why}"


def _floor(kind: DeviceType, directory: Path | None) -> tuple[float | None, str]:
    """The lowest plausible mean power of ``kind`` and what it is."""
    rest = rest_power_w(kind.name, directory)
    if rest is not None:
        return rest, "the device's measured rest power"
    spec = DEVICE_CATALOG.get(kind.name)
    if spec is None:
        return None, ""
    share = f"{100 * CATALOG_IDLE_SHARE:.0f}%"
    return CATALOG_IDLE_SHARE * spec.idle_power_w, f"{share} of the catalog's idle power"


def catalog_max_w(kind: DeviceType) -> float:
    """The catalog's maximum power of ``kind``, watts; the cluster's figure for a type outside
    the catalog (a cluster's types may carry a power fit: the catalog's figure does not)."""
    spec = DEVICE_CATALOG.get(kind.name)
    return spec.max_power_w if spec is not None else kind.max_power_w


def type_limit_w(m: Measurement, cluster: Cluster, kind: str) -> float:
    """The power limit of device type ``kind`` in run ``m``: the lowest limit NVML enforced on
    its ranks, else the catalog's maximum power, watts."""
    ranks = [r for r in m.ranks if cluster.device(r.device).type.name == kind]
    limits = [r.power_limit_w for r in ranks if r.power_limit_w is not None]
    return min(limits) if limits else catalog_max_w(cluster.device(ranks[0].device).type)


def gpu_power_points(
    m: Measurement, cluster: Cluster, directory: Path | None = None
) -> dict[str, list[tuple[float, float]]]:
    """(busy fraction, mean watts over the timed window) of every rank whose GPU was metered
    (NVML) with a plausible reading, by device type: points for the utilisation power model's
    fit (RAPL readings cover a whole node and are not split between device types)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in m.ranks:
        if r.energy_source != "nvml" or r.power_w is None or r.step_s <= 0:
            continue
        if energy_problem(r, cluster, directory) is not None:
            continue
        busy = min(1.0, (r.forward_s + r.backward_s + r.optimizer_s) / r.step_s)
        out.setdefault(cluster.device(r.device).type.name, []).append((busy, r.power_w))
    return out
