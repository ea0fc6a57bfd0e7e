"""Energy: measured where the hardware has a counter, modelled where it has none.

What is measured where:

- **CUDA GPUs** (``cuda:K``): NVML's ``nvmlDeviceGetTotalEnergyConsumption``, millijoules
  since the driver was last loaded, through ``pynvml`` (package ``nvidia-ml-py``, the extra
  ``hetplan[gpu]``). The counter exists on Volta and newer GPUs only; older ones answer
  "not supported" and get no meter. It covers the whole GPU, so work of other processes on
  the same GPU counts too.
- **CPUs** (``cpu``): Intel RAPL (and AMD's RAPL-compatible counters) through the Linux
  powercap sysfs tree, ``/sys/class/powercap/intel-rapl:N/energy_uj``, summed over the
  package domains. A package domain covers a whole CPU package (cores, caches, uncore), not
  one process: several ranks on one package share one reading, so the caller must read it
  once per package (once per node here, as the meter sums all packages), not once per rank,
  and split it between the ranks itself. Since November 2020 (CVE-2020-8694, "PLATYPUS")
  kernels make ``energy_uj`` readable by root only, so an ordinary user usually gets no meter.
- **Otherwise**: :func:`modelled_energy_j`, the utilisation model of
  :func:`hetplan.cost.power.utilization_power` applied to the measured busy and wall time.
  :func:`meter_for` returns the reason a device has no meter, so a report can label each
  figure as measured (and by what) or modelled (and why).

Counters advance in discrete updates, so measure spans of many steps (seconds), not single
kernels. A RAPL counter wraps at ``max_energy_range_uj`` (a 32-bit register: minutes at
full load); :class:`RaplMeter` undoes one wrap between two reads, so a span longer than the
wrap period needs intermediate ``read_j()`` calls.

Measured (busy fraction, watts) pairs fit the utilisation model's idle and maximum power in
:mod:`hetplan.profile.power_fit` (torch-free, so that ``plan`` and ``predict`` read fits without
the runtime).
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Protocol, runtime_checkable

from hetplan.cluster.spec import DeviceType
from hetplan.cost.power import energy_j, utilization_power
from hetplan.errors import HetplanError, InputError
from hetplan.profile.power_fit import LIMIT_MARGIN

__all__ = [
    "DEFAULT_POWERCAP_ROOT",
    "EnergyMeter",
    "EnergyWindow",
    "MeterUnavailableError",
    "NvmlMeter",
    "RaplMeter",
    "average_watts",
    "implausible_power",
    "meter_for",
    "modelled_energy_j",
    "power_limit_w",
    "rapl_package_domains",
]

# Linux powercap sysfs class directory (kernel Documentation/power/powercap/powercap.rst).
DEFAULT_POWERCAP_ROOT = Path("/sys/class/powercap")
# energy_uj and max_energy_range_uj are in microjoules (powercap.rst: "energy_uj").
UJ_PER_J = 1_000_000  # uJ/J
# nvmlDeviceGetTotalEnergyConsumption returns millijoules (NVML API reference, Device Queries).
MJ_PER_J = 1_000  # mJ/J
# nvmlDeviceGetEnforcedPowerLimit returns milliwatts (NVML API reference, Device Queries).
MW_PER_W = 1_000  # mW/W
"""A metered mean power may exceed the enforced limit by this fraction (the limit is held as an
average over the driver's own window; issue 24's rule), no more."""
# Package domains: "intel-rapl:N" (one colon; "intel-rapl:N:M" are sub-domains such as core
# and dram, already inside the package). AMD counters appear under the intel-rapl driver's
# names on most kernels; an "amd-rapl:N" tree laid out the same is accepted too.
_PACKAGE_DOMAIN = re.compile(r"^(intel|amd)-rapl:(\d+)$")
# A domain's "name" file: "package-N" for packages; "psys" (whole platform, client CPUs)
# also sits at the top level and would double-count the packages (powercap.rst, intel-rapl).
_PACKAGE_NAME_PREFIX = "package"
NVML_PACKAGE = "nvidia-ml-py"  # PyPI package providing the pynvml module (NVIDIA-maintained)


class MeterUnavailableError(HetplanError):
    """No energy counter can be read here (library, driver, hardware or permission missing).

    :func:`meter_for` turns it into ``(None, reason)``; callers then fall back to the model.
    """


@runtime_checkable
class EnergyMeter(Protocol):
    """A cumulative energy counter."""

    name: str
    """Counter kind: ``nvml`` or ``rapl``."""
    scope: str
    """What the reading covers, e.g. ``cuda:0 (NVML index 0)`` or ``cpu package-0 (...)``."""

    def read_j(self) -> float:
        """Joules since a fixed origin (the meter's creation), never decreasing."""
        ...


class _Accumulator:
    """Total of the forward steps of a raw integer counter.

    ``wrap``: the counter restarts from 0 after reaching this value, so a decrease means one
    wrap. ``None``: it never wraps in practice, so a decrease means a reset (driver reload)
    and the new raw value is the energy since that reset.
    """

    def __init__(self, first: int, wrap: int | None) -> None:
        self._last = first
        self._wrap = wrap
        self.total = 0

    def update(self, raw: int) -> int:
        step = raw - self._last
        if step < 0:
            step = step + self._wrap if self._wrap is not None else raw
        self._last = raw
        self.total += max(step, 0)
        return self.total


# --------------------------------------------------------------------------- RAPL


def _read_uj(path: Path) -> int:
    try:
        text = path.read_text()
    except PermissionError:
        raise MeterUnavailableError(
            f"{path}: permission denied (energy_uj is root-only since CVE-2020-8694)"
        ) from None
    except OSError as err:
        raise MeterUnavailableError(f"{path}: not readable ({err.strerror})") from None
    try:
        return int(text.strip())
    except ValueError:
        raise MeterUnavailableError(f"{path}: not an integer ({text.strip()!r})") from None


def _domain_name(domain: Path) -> str | None:
    try:
        return (domain / "name").read_text().strip() or None
    except OSError:
        return None


def rapl_package_domains(powercap_root: Path = DEFAULT_POWERCAP_ROOT) -> list[Path]:
    """The package domain directories under ``powercap_root``, in package order.

    Sub-domains (``intel-rapl:0:0``), the control-type directory (``intel-rapl``), MMIO
    duplicates (``intel-rapl-mmio:0``) and platform domains (name ``psys``) are left out.
    """
    found: list[tuple[str, int, Path]] = []
    for entry in powercap_root.iterdir():
        m = _PACKAGE_DOMAIN.match(entry.name)
        if m is None:
            continue
        name = _domain_name(entry)
        if name is not None and not name.startswith(_PACKAGE_NAME_PREFIX):
            continue
        found.append((m.group(1), int(m.group(2)), entry))
    return [path for _, _, path in sorted(found)]


class RaplMeter:
    """Sum of the RAPL package counters in ``paths`` (domain directories with ``energy_uj``
    and ``max_energy_range_uj``); raises MeterUnavailableError if one cannot be read."""

    name = "rapl"

    def __init__(self, paths: Sequence[Path]) -> None:
        if not paths:
            raise MeterUnavailableError("no RAPL package domains given")
        self._paths = tuple(paths)
        self._counters: list[_Accumulator] = []
        for path in self._paths:
            wrap = _read_uj(path / "max_energy_range_uj")
            if wrap <= 0:
                raise MeterUnavailableError(f"{path / 'max_energy_range_uj'}: {wrap} is not > 0")
            self._counters.append(_Accumulator(_read_uj(path / "energy_uj"), wrap))
        labels = ", ".join(_domain_name(p) or p.name for p in self._paths)
        self.scope = f"cpu {labels} (whole packages: every rank on them shares this reading)"

    def read_j(self) -> float:
        total_uj = sum(
            c.update(_read_uj(p / "energy_uj"))
            for p, c in zip(self._paths, self._counters, strict=True)
        )
        return total_uj / UJ_PER_J


# --------------------------------------------------------------------------- NVML


def _import_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise MeterUnavailableError(
            f"{NVML_PACKAGE} not installed (pip install 'hetplan[gpu]')"
        ) from None


class NvmlMeter:
    """NVML's total-energy counter of the GPU ``cuda:<index>`` (Volta or newer).

    ``uuid`` (``GPU-...``, as NVML spells it) finds the GPU when ``CUDA_VISIBLE_DEVICES`` or
    ``CUDA_DEVICE_ORDER`` make CUDA's numbering differ from NVML's; without it the NVML index
    is taken to be ``index``. Raises MeterUnavailableError when ``pynvml`` is missing, NVML
    cannot start, or the GPU has no total-energy counter.
    """

    name = "nvml"

    def __init__(self, index: int, *, uuid: str | None = None) -> None:
        nvml: Any = _import_pynvml()
        self._nvml = nvml
        self._index = index
        try:
            nvml.nvmlInit()  # reference-counted by NVML; cheap when already initialised
            if uuid is not None:  # bytes: old pynvml bindings take no str here
                self._handle = nvml.nvmlDeviceGetHandleByUUID(uuid.encode())
            else:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as err:
            which = uuid if uuid is not None else f"NVML index {index}"
            raise MeterUnavailableError(f"NVML cannot open cuda:{index} ({which}): {err}") from None
        self._counter = _Accumulator(self._raw_mj(), wrap=None)
        self.scope = f"cuda:{index} ({uuid if uuid is not None else f'NVML index {index}'})"

    def _raw_mj(self) -> int:
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except AttributeError:
            raise MeterUnavailableError(
                f"pynvml has no nvmlDeviceGetTotalEnergyConsumption: upgrade {NVML_PACKAGE}"
            ) from None
        except self._nvml.NVMLError as err:
            raise MeterUnavailableError(
                f"cuda:{self._index}: NVML total-energy counter unavailable ({err}); "
                "it needs a Volta or newer GPU"
            ) from None

    def read_j(self) -> float:
        return self._counter.update(self._raw_mj()) / MJ_PER_J

    def power_limit_w(self) -> float | None:
        """The GPU's enforced power limit (``nvmlDeviceGetEnforcedPowerLimit``, milliwatts),
        watts; None where NVML does not give it."""
        try:
            return float(self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle)) / MW_PER_W
        except (AttributeError, self._nvml.NVMLError):
            return None


def power_limit_w(meter: EnergyMeter) -> float | None:
    """The enforced power limit of what ``meter`` covers, watts (NVML only; None otherwise)."""
    read = getattr(meter, "power_limit_w", None)
    return read() if callable(read) else None


def implausible_power(
    watts: float,
    *,
    limit_w: float | None,
    idle_w: float | None,
    idle_what: str = "the device's measured rest power",
) -> str | None:
    """Why a metered mean power cannot be right, or None: above the enforced limit by more
    than :data:`LIMIT_MARGIN`, or below ``idle_w`` (``idle_what`` says what that floor is): a
    window that missed part of its energy, or a counter that did not advance."""
    if limit_w is not None and watts > limit_w * (1 + LIMIT_MARGIN):
        return (
            f"implies {watts:.0f} W, above the enforced power limit {limit_w:.0f} W "
            f"(+{100 * LIMIT_MARGIN:.0f}% allowed)"
        )
    if idle_w is not None and watts < idle_w:
        return f"implies {watts:.0f} W, below {idle_what} {idle_w:.0f} W"
    if not watts > 0:
        return f"implies {watts:.0f} W: the counter did not advance"
    return None


def _cuda_uuid(index: int) -> str | None:
    """NVML's UUID of ``cuda:<index>`` from torch, if torch is loaded and sees CUDA.

    Initialises CUDA in this process: call it in the rank that uses the GPU.
    """
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return None
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    except Exception:  # a broken CUDA set-up only costs the UUID; NVML still gets the index
        return None
    return f"GPU-{uuid}" if uuid is not None else None


# --------------------------------------------------------------------------- choosing


def meter_for(
    device: str, *, powercap_root: Path = DEFAULT_POWERCAP_ROOT
) -> tuple[EnergyMeter | None, str]:
    """The energy meter of ``device`` (``cpu``, ``cuda`` or ``cuda:K``) and ``""``, or
    ``None`` and why there is none. Never raises for a missing counter."""
    kind, _, index_text = device.partition(":")
    if kind == "cuda":
        if index_text and not index_text.isdigit():
            return None, f"device {device!r}: expected cuda:K"
        index = int(index_text) if index_text else 0
        try:
            return NvmlMeter(index, uuid=_cuda_uuid(index)), ""
        except MeterUnavailableError as err:
            return None, str(err)
    if kind == "cpu":
        try:
            domains = rapl_package_domains(powercap_root)
        except OSError:
            return None, f"{powercap_root} not readable"
        if not domains:
            return None, f"no RAPL package domains under {powercap_root}"
        try:
            return RaplMeter(domains), ""
        except MeterUnavailableError as err:
            return None, str(err)
    return None, f"no energy counter for device {device!r}"


# --------------------------------------------------------------------------- spans


def average_watts(joules: float, seconds: float) -> float:
    """Average power in watts of ``joules`` spent over ``seconds`` (> 0)."""
    if not seconds > 0:
        raise InputError(f"average power needs a duration > 0 s (got {seconds})")
    return joules / seconds


class EnergyWindow:
    """Joules a meter counts between :meth:`start` and :meth:`stop`, with the wall time.

    Usable as a context manager: ``with EnergyWindow(m) as w: ...`` then ``w.joules``.
    """

    def __init__(
        self, meter: EnergyMeter, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.meter = meter
        self._clock = clock
        self._start: tuple[float, float] | None = None
        self.joules: float | None = None
        """Energy of the last completed window, joules."""
        self.seconds: float | None = None
        """Wall time of the last completed window, seconds."""

    def start(self) -> None:
        """Begin a window (a running one is restarted)."""
        self._start = (self.meter.read_j(), self._clock())

    def stop(self) -> float:
        """End the window; return its joules."""
        if self._start is None:
            raise RuntimeError("EnergyWindow.stop() without start()")
        j0, t0 = self._start
        self.joules = self.meter.read_j() - j0
        self.seconds = self._clock() - t0
        self._start = None
        return self.joules

    def average_w(self) -> float:
        """Average watts of the last completed window."""
        if self.joules is None or self.seconds is None:
            raise RuntimeError("EnergyWindow.average_w() before a window was stopped")
        return average_watts(self.joules, self.seconds)

    def __enter__(self) -> EnergyWindow:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- modelled


def modelled_energy_j(device_type: DeviceType, busy_s: float, span_s: float) -> float:
    """Joules by the utilisation model for a device busy ``busy_s`` of ``span_s`` seconds:
    ``utilization_power(device_type, busy_s / span_s) * span_s`` (busy fraction clamped to 1).
    """
    if not span_s > 0:
        raise InputError(f"modelled energy needs a span > 0 s (got {span_s})")
    if not busy_s >= 0:
        raise InputError(f"modelled energy needs busy time >= 0 s (got {busy_s})")
    return energy_j(utilization_power(device_type, busy_s / span_s), span_s)
