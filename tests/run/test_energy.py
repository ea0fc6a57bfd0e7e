"""Energy meters (fake RAPL sysfs, fake pynvml), windows, the power fit and its store.

Every expected figure is worked out by hand in the comments; no GPU, root or pynvml needed.
"""

from __future__ import annotations

import json
import math
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from hetplan.cluster.spec import DeviceType
from hetplan.errors import InputError
from hetplan.profile.power_fit import (
    PowerFit,
    apply_power_fit,
    fit_utilization_power,
    load_power_fit,
    save_power_fit,
)
from hetplan.profile.store import load_profiles
from hetplan.run.meters import energy
from hetplan.run.meters.energy import (
    EnergyMeter,
    EnergyWindow,
    MeterUnavailableError,
    NvmlMeter,
    RaplMeter,
    average_watts,
    meter_for,
    modelled_energy_j,
    rapl_package_domains,
)

# ---------------------------------------------------------------------------- fake RAPL

# A common Intel value: 32-bit counter in 61.035 uJ units -> 262143328850 uJ.
RANGE_UJ = 262_143_328_850


def _domain(root: Path, dirname: str, name: str, energy_uj: int, range_uj: int = RANGE_UJ) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return d


def _set(domain: Path, energy_uj: int) -> None:
    (domain / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    """Two packages plus everything a real tree has that must NOT be counted."""
    root = tmp_path / "powercap"
    _domain(root, "intel-rapl:0", "package-0", 262_143_000_000)  # 328850 uJ before wrapping
    _domain(root, "intel-rapl:1", "package-1", 1_000_000)
    _domain(root, "intel-rapl:0:0", "core", 5_000_000)  # sub-domain of package 0
    _domain(root, "intel-rapl:0:1", "dram", 7_000_000)
    _domain(root, "intel-rapl:2", "psys", 9_000_000)  # whole platform: would double-count
    _domain(root, "intel-rapl-mmio:0", "package-0", 11_000_000)  # MMIO duplicate of pkg 0
    (root / "intel-rapl").mkdir()  # the control-type directory
    (root / "intel-rapl" / "enabled").write_text("1\n")
    return root


def test_package_domains_only(powercap: Path) -> None:
    names = [p.name for p in rapl_package_domains(powercap)]
    assert names == ["intel-rapl:0", "intel-rapl:1"]


def test_amd_style_domains_are_accepted(tmp_path: Path) -> None:
    _domain(tmp_path, "amd-rapl:0", "package-0", 0)
    _domain(tmp_path, "amd-rapl:0:0", "core", 0)
    assert [p.name for p in rapl_package_domains(tmp_path)] == ["amd-rapl:0"]


def test_rapl_sums_packages_and_undoes_a_wrap(powercap: Path) -> None:
    meter, reason = meter_for("cpu", powercap_root=powercap)
    assert reason == ""
    assert isinstance(meter, RaplMeter)
    assert isinstance(meter, EnergyMeter)
    assert meter.name == "rapl"
    assert "package-0" in meter.scope and "package-1" in meter.scope
    assert meter.read_j() == 0.0  # origin: the meter's creation

    # package 0 wraps: 262143000000 -> (top 262143328850) -> 500000
    #   = (262143328850 - 262143000000) + 500000 = 328850 + 500000 = 828850 uJ
    # package 1 plain: 3500000 - 1000000 = 2500000 uJ
    # sum 3328850 uJ = 3.32885 J
    _set(powercap / "intel-rapl:0", 500_000)
    _set(powercap / "intel-rapl:1", 3_500_000)
    assert meter.read_j() == pytest.approx(3.32885, abs=1e-9)

    # next read, no wrap: +1000000 uJ on package 0 and +250000 uJ on package 1
    #   3328850 + 1250000 = 4578850 uJ = 4.57885 J
    _set(powercap / "intel-rapl:0", 1_500_000)
    _set(powercap / "intel-rapl:1", 3_750_000)
    assert meter.read_j() == pytest.approx(4.57885, abs=1e-9)


def test_small_wrap_range_by_hand(tmp_path: Path) -> None:
    d = _domain(tmp_path, "intel-rapl:0", "package-0", 900, range_uj=1000)
    meter = RaplMeter([d])
    _set(d, 100)  # 900 -> 1000 (top) -> 100: 100 + 100 = 200 uJ
    assert meter.read_j() == pytest.approx(200e-6)


def test_unreadable_energy_file_means_no_meter(
    powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite may run as root, where chmod 000 does not stop reads: refuse by patching.
    real_read_text = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    meter, reason = meter_for("cpu", powercap_root=powercap)
    assert meter is None
    assert "energy_uj" in reason and "permission denied" in reason


def test_missing_powercap_tree_means_no_meter(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    meter, reason = meter_for("cpu", powercap_root=missing)
    assert meter is None
    assert reason == f"{missing} not readable"


def test_tree_without_packages_means_no_meter(tmp_path: Path) -> None:
    (tmp_path / "intel-rapl").mkdir()
    meter, reason = meter_for("cpu", powercap_root=tmp_path)
    assert meter is None
    assert "no RAPL package domains" in reason


def test_garbage_counter_means_no_meter(tmp_path: Path) -> None:
    d = _domain(tmp_path, "intel-rapl:0", "package-0", 0)
    (d / "energy_uj").write_text("n/a\n")
    meter, reason = meter_for("cpu", powercap_root=tmp_path)
    assert meter is None
    assert "not an integer" in reason


def test_unknown_device_has_no_meter() -> None:
    assert meter_for("mps")[0] is None
    meter, reason = meter_for("cuda:x")
    assert meter is None and "cuda:K" in reason


# ---------------------------------------------------------------------------- fake NVML


class _FakeNvml(types.ModuleType):
    """Just enough of pynvml: scripted mJ readings per handle."""

    class NVMLError(Exception):
        pass

    def __init__(self, readings_mj: list[int], *, supported: bool = True) -> None:
        super().__init__("pynvml")
        self.readings = iter(readings_mj)
        self.supported = supported
        self.opened: list[object] = []

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:  # noqa: N802
        self.opened.append(("index", index))
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> object:  # noqa: N802
        self.opened.append(("uuid", uuid))
        return ("uuid", uuid)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:  # noqa: N802
        if not self.supported:
            raise self.NVMLError("Not Supported")
        return next(self.readings)


@pytest.fixture
def no_torch_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a CUDA machine torch would supply the real UUID; keep the tests machine-independent.
    monkeypatch.setattr(energy, "_cuda_uuid", lambda index: None)


def _install(monkeypatch: pytest.MonkeyPatch, fake: types.ModuleType | None) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # None: "import pynvml" fails


@pytest.mark.usefixtures("no_torch_uuid")
def test_cuda_without_pynvml_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, None)
    meter, reason = meter_for("cuda:0")
    assert meter is None
    assert "nvidia-ml-py" in reason
    with pytest.raises(MeterUnavailableError, match="nvidia-ml-py"):
        NvmlMeter(0)


@pytest.mark.usefixtures("no_torch_uuid")
def test_nvml_converts_millijoules(monkeypatch: pytest.MonkeyPatch) -> None:
    # origin 1000000 mJ; then 1002500 mJ -> 2500 mJ = 2.5 J; then 1010000 -> 10000 mJ = 10 J
    fake = _FakeNvml([1_000_000, 1_002_500, 1_010_000])
    _install(monkeypatch, fake)
    meter, reason = meter_for("cuda:3")
    assert reason == ""
    assert isinstance(meter, NvmlMeter)
    assert meter.name == "nvml"
    assert meter.scope == "cuda:3 (NVML index 3)"
    assert fake.opened == [("index", 3)]
    assert meter.read_j() == pytest.approx(2.5)
    assert meter.read_j() == pytest.approx(10.0)


@pytest.mark.usefixtures("no_torch_uuid")
def test_nvml_counter_reset_counts_from_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5000 -> 7000: +2000 mJ; driver reload, counter 1000: +1000 (since the reset);
    # 1000 -> 1500: +500. Totals 2.0 J, 3.0 J, 3.5 J.
    _install(monkeypatch, _FakeNvml([5000, 7000, 1000, 1500]))
    meter = NvmlMeter(0)
    assert [meter.read_j(), meter.read_j(), meter.read_j()] == pytest.approx([2.0, 3.0, 3.5])


def test_nvml_uses_the_uuid_when_torch_knows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml([0, 1000])
    _install(monkeypatch, fake)
    monkeypatch.setattr(energy, "_cuda_uuid", lambda index: f"GPU-fake-{index}")
    meter, _ = meter_for("cuda:1")
    assert meter is not None
    assert fake.opened == [("uuid", b"GPU-fake-1")]
    assert meter.scope == "cuda:1 (GPU-fake-1)"
    assert meter.read_j() == pytest.approx(1.0)


@pytest.mark.usefixtures("no_torch_uuid")
def test_bindings_without_the_energy_call(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml([])
    monkeypatch.setattr(_FakeNvml, "nvmlDeviceGetTotalEnergyConsumption", property())
    _install(monkeypatch, fake)
    meter, reason = meter_for("cuda:0")
    assert meter is None and "upgrade nvidia-ml-py" in reason


def test_cuda_uuid_from_torch_gets_nvml_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    props = types.SimpleNamespace(uuid="58d5d5b8-0000-1111-2222-333344445555")
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 2,
        get_device_properties=lambda index: props,
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert energy._cuda_uuid(1) == "GPU-58d5d5b8-0000-1111-2222-333344445555"
    assert energy._cuda_uuid(2) is None  # not a visible device
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    assert energy._cuda_uuid(0) is None
    monkeypatch.delitem(sys.modules, "torch")
    assert energy._cuda_uuid(0) is None  # torch not loaded: not imported just for this


@pytest.mark.usefixtures("no_torch_uuid")
def test_pre_volta_gpu_falls_back_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, _FakeNvml([], supported=False))
    meter, reason = meter_for("cuda")  # bare "cuda" means cuda:0
    assert meter is None
    assert "cuda:0" in reason and "Volta" in reason


# ---------------------------------------------------------------------------- windows


class _ScriptedMeter:
    name = "fake"
    scope = "test"

    def __init__(self, readings: list[float]) -> None:
        self._readings: Iterator[float] = iter(readings)

    def read_j(self) -> float:
        return next(self._readings)


def _clock(times: list[float]) -> Callable[[], float]:
    it = iter(times)
    return lambda: next(it)


def test_window_joules_seconds_and_watts() -> None:
    # meter 10.0 J -> 13.5 J over clock 100.0 s -> 102.0 s: 3.5 J in 2 s = 1.75 W
    w = EnergyWindow(_ScriptedMeter([10.0, 13.5]), clock=_clock([100.0, 102.0]))
    w.start()
    assert w.stop() == pytest.approx(3.5)
    assert w.seconds == pytest.approx(2.0)
    assert w.average_w() == pytest.approx(1.75)


def test_window_as_context_manager() -> None:
    with EnergyWindow(_ScriptedMeter([1.0, 31.0]), clock=_clock([0.0, 10.0])) as w:
        pass
    assert w.joules == pytest.approx(30.0)  # 31 - 1
    assert w.average_w() == pytest.approx(3.0)  # 30 J / 10 s


def test_window_over_a_rapl_meter(powercap: Path) -> None:
    meter, _ = meter_for("cpu", powercap_root=powercap)
    assert meter is not None
    w = EnergyWindow(meter)
    w.start()
    _set(powercap / "intel-rapl:1", 1_400_000)  # +400000 uJ = 0.4 J
    assert w.stop() == pytest.approx(0.4)


def test_window_misuse() -> None:
    w = EnergyWindow(_ScriptedMeter([]))
    with pytest.raises(RuntimeError, match="without start"):
        w.stop()
    with pytest.raises(RuntimeError, match="before a window"):
        w.average_w()


def test_average_watts() -> None:
    assert average_watts(600.0, 4.0) == 150.0  # 600 J / 4 s
    with pytest.raises(InputError, match="duration > 0"):
        average_watts(1.0, 0.0)


# ---------------------------------------------------------------------------- power fit


def test_fit_recovers_exact_line() -> None:
    # P = 60 + (300 - 60) * u = 60 + 240 u, sampled exactly
    samples = [(u, 60.0 + 240.0 * u) for u in (0.0, 0.25, 0.5, 1.0)]
    fit = fit_utilization_power(samples)
    assert fit.idle_w == pytest.approx(60.0, abs=1e-9)
    assert fit.max_w == pytest.approx(300.0, abs=1e-9)
    assert fit.samples == 4
    assert fit.rms_error_w == pytest.approx(0.0, abs=1e-9)


def test_fit_three_points_by_hand() -> None:
    # (0, 100), (0.5, 220), (1, 300): mean u 0.5, mean P 620/3;
    # Sxy = (-0.5)(100 - 620/3) + 0 + (0.5)(300 - 620/3) = 0.5 * 200 = 100, Sxx = 0.5
    # slope 200, intercept 620/3 - 100 = 320/3; max = 320/3 + 200 = 920/3
    # residuals -20/3, +40/3, -20/3: rms = sqrt((400 + 1600 + 400) / 9 / 3) = sqrt(800/9)
    fit = fit_utilization_power([(0.0, 100.0), (0.5, 220.0), (1.0, 300.0)])
    assert fit.idle_w == pytest.approx(320 / 3)
    assert fit.max_w == pytest.approx(920 / 3)
    assert fit.rms_error_w == pytest.approx(math.sqrt(800 / 9))


def test_fit_symmetric_noise_cancels() -> None:
    # +-5 W around 80 W at u=0 and 280 W at u=1: the line is unchanged, rms exactly 5 W
    samples = [(0.0, 85.0), (0.0, 75.0), (1.0, 285.0), (1.0, 275.0)]
    fit = fit_utilization_power(samples)
    assert fit.idle_w == pytest.approx(80.0)
    assert fit.max_w == pytest.approx(280.0)
    assert fit.rms_error_w == pytest.approx(5.0)


def test_fit_noisy_points_within_tolerance() -> None:
    # idle 70 W, max 350 W, Gaussian noise sd 4 W over 200 loads: standard errors are about
    # 4 / sqrt(200 * var(u)) ~ 1 W on the slope, so 3 W is a generous bound.
    rng = np.random.default_rng(1234)
    u = rng.uniform(0.0, 1.0, 200)
    watts = 70.0 + 280.0 * u + rng.normal(0.0, 4.0, 200)
    fit = fit_utilization_power(list(zip(u.tolist(), watts.tolist(), strict=True)))
    assert fit.idle_w == pytest.approx(70.0, abs=3.0)
    assert fit.max_w == pytest.approx(350.0, abs=3.0)
    assert fit.rms_error_w == pytest.approx(4.0, abs=1.0)


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([], "at least 2"),
        ([(0.5, 100.0)], "at least 2"),
        ([(0.5, 100.0), (0.5, 120.0), (0.5, 110.0)], "undetermined"),
        ([(0.0, 100.0), (1.5, 200.0)], r"\[0, 1\]"),
        ([(0.0, 100.0), (1.0, float("nan"))], "finite"),
    ],
)
def test_fit_rejects_bad_input(samples: list[tuple[float, float]], message: str) -> None:
    with pytest.raises(InputError, match=message):
        fit_utilization_power(samples)


# ---------------------------------------------------------------------------- store


def test_save_load_round_trip(tmp_path: Path) -> None:
    fit = PowerFit(idle_w=61.5, max_w=298.25, samples=12, rms_error_w=3.5)
    path = save_power_fit("A100-40GB", fit, tmp_path)
    assert path == tmp_path / "power__A100-40GB.json"
    assert json.loads(path.read_text()) == {
        "idle_w": 61.5,
        "max_w": 298.25,
        "samples": 12,
        "rms_error_w": 3.5,
    }
    assert load_power_fit("A100-40GB", tmp_path) == fit
    assert load_power_fit("V100-32GB", tmp_path) is None
    assert load_profiles(tmp_path) == []  # the profile loader skips power fits


def test_save_uses_the_profile_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPLAN_PROFILE_DIR", str(tmp_path / "env"))
    fit = PowerFit(idle_w=10.0, max_w=65.0, samples=2, rms_error_w=0.0)
    path = save_power_fit("cpu/odd name", fit)
    assert path == tmp_path / "env" / "power__cpu-odd-name.json"
    assert load_power_fit("cpu/odd name") == fit


def test_load_bad_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "power__cpu.json").write_text('{"idle_w": 1.0}\n')
    with pytest.raises(InputError, match=r"power__cpu\.json"):
        load_power_fit("cpu", tmp_path)


def _device_type(**kw: object) -> DeviceType:
    args: dict[str, object] = {
        "name": "T4",
        "peak_flops": {"fp32": 8.1e12},
        "memory_bandwidth": 320e9,
        "memory_bytes": 16e9,
        "idle_power_w": 50.0,
        "max_power_w": 250.0,
        "source": "spec sheet",
    }
    args.update(kw)
    return DeviceType(**args)  # type: ignore[arg-type]


def test_apply_power_fit_replaces_idle_and_max() -> None:
    dt = _device_type()
    fit = PowerFit(idle_w=32.0, max_w=71.0, samples=5, rms_error_w=1.25)
    new = apply_power_fit(dt, fit)
    assert (new.idle_power_w, new.max_power_w) == (32.0, 71.0)
    assert (dt.idle_power_w, dt.max_power_w) == (50.0, 250.0)  # original untouched
    assert new.name == dt.name and new.peak_flops == dt.peak_flops
    assert new.memory_bandwidth == dt.memory_bandwidth
    assert new.source.startswith("spec sheet; ") and "5 samples" in new.source


def test_apply_power_fit_refuses_unusable_fits() -> None:
    with pytest.raises(InputError, match="idle <= max"):
        apply_power_fit(_device_type(), PowerFit(idle_w=90.0, max_w=80.0, samples=3, rms_error_w=1))
    with pytest.raises(InputError, match="idle <= max"):
        apply_power_fit(_device_type(), PowerFit(idle_w=-5.0, max_w=80.0, samples=3, rms_error_w=1))


# ---------------------------------------------------------------------------- modelled


def test_modelled_energy_by_hand() -> None:
    dt = _device_type()  # idle 50 W, max 250 W
    # busy 3 s of 4 s: u = 0.75, P = 50 + 200 * 0.75 = 200 W, E = 200 * 4 = 800 J
    assert modelled_energy_j(dt, 3.0, 4.0) == pytest.approx(800.0)
    # idle throughout: 50 W * 10 s = 500 J
    assert modelled_energy_j(dt, 0.0, 10.0) == pytest.approx(500.0)
    # busy longer than the span (timer jitter): u clamps to 1, 250 W * 4 s = 1000 J
    assert modelled_energy_j(dt, 5.0, 4.0) == pytest.approx(1000.0)


def test_modelled_energy_checks_its_inputs() -> None:
    dt = _device_type()
    with pytest.raises(InputError, match="span > 0"):
        modelled_energy_j(dt, 1.0, 0.0)
    with pytest.raises(InputError, match="busy time >= 0"):
        modelled_energy_j(dt, -1.0, 2.0)


class _LimitedNvml(_FakeNvml):
    """A fake NVML that also gives the enforced power limit (milliwatts), or fails to."""

    def __init__(self, limit_mw: int | None) -> None:
        super().__init__([0, 0])
        self.limit_mw = limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:  # noqa: N802
        if self.limit_mw is None:
            raise self.NVMLError("Not Supported")
        return self.limit_mw


@pytest.mark.usefixtures("no_torch_uuid")
@pytest.mark.parametrize(
    ("fake", "watts"),
    [(_LimitedNvml(700_000), 700.0), (_LimitedNvml(None), None), (_FakeNvml([0]), None)],
)
def test_nvml_enforced_limit_in_watts_or_none(
    monkeypatch: pytest.MonkeyPatch, fake: _FakeNvml, watts: float | None
) -> None:
    _install(monkeypatch, fake)
    meter = NvmlMeter(0)
    assert meter.power_limit_w() == watts
    assert energy.power_limit_w(meter) == watts


def test_implausible_power_names_its_figures() -> None:
    assert energy.implausible_power(704.0, limit_w=700.0, idle_w=72.5) is None
    assert energy.implausible_power(832.0, limit_w=700.0, idle_w=72.5) == (
        "implies 832 W, above the enforced power limit 700 W (+5% allowed)"
    )
    assert energy.implausible_power(50.0, limit_w=700.0, idle_w=72.5) == (
        "implies 50 W, below the device's measured rest power 72 W"
    )
    assert energy.implausible_power(0.0, limit_w=None, idle_w=None) == (
        "implies 0 W: the counter did not advance"
    )
