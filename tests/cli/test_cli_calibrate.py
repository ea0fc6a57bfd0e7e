"""``hetplan calibrate`` on this CPU: stored curves round-trip and drive the analytical model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device
from hetplan.cost.calibration import Calibration
from hetplan.cost.compute import AnalyticalCompute
from hetplan.profile.calib_store import calibration_path, load_calibration, load_calibrations
from hetplan.profile.select import compute_model
from hetplan.serde import from_data

QUICK = ["--classes", "matmul,memory", "--min-time", "0"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    out = capsys.readouterr()
    return (code if isinstance(code, int) else 0 if code is None else 1), out.out, out.err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", *QUICK, "--out", str(root), "--json"])
    assert exc.value.code in (0, None)
    return root


def test_round_trip_through_the_store(store: Path) -> None:
    path = calibration_path("cpu", "fp32", store)
    cal = load_calibration(path)
    assert load_calibrations(store) == [cal]
    assert from_data(Calibration, json.loads(path.read_text()), str(path)) == cal
    assert {(c.op_class, c.backward) for c in cal.curves} == {
        ("matmul", False), ("matmul", True), ("memory", False), ("memory", True),
    }  # fmt: skip
    # One matmul family per width (k / 4 FLOPs per byte of a k-wide fp32 activation).
    widths = {c.intensity * 4 for c in cal.curves if c.op_class == "matmul"}
    assert widths == {64, 256, 512, 1024}
    for c in cal.curves:
        assert len(c.points) >= 3
        assert all(p.seconds > 0 for p in c.points)
    # Bigger matmuls reach a higher rate than the smallest probe (launch-bound): a real curve.
    mm = cal.curve("matmul", False)
    assert mm is not None and mm.best_rate() > mm.rate(mm.points[0].work)


def test_stored_calibration_prices_without_profiles(store: Path) -> None:
    cpu = Device(id="c0", type=device_type("cpu"), node="n", index=0)
    fp32 = compute_model("fp32", directory=store, measured=False)
    bf16 = compute_model("bf16", directory=store, measured=False)
    assert isinstance(fp32, AnalyticalCompute) and isinstance(bf16, AnalyticalCompute)
    assert fp32.source(cpu) == "calibrated on cpu"
    assert bf16.source(cpu) == "analytical"  # calibrated in fp32 only


def test_table_names_every_curve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["calibrate", *QUICK, "--out", str(tmp_path / "c.json")], capsys)
    assert code == 0, err
    assert "matmul" in out and "memory" in out
    assert f"stored in {tmp_path / 'c.json'}" in out.replace("\n", "")
    cal = load_calibration(tmp_path / "c.json")
    assert cal.device_type == "cpu"
    # A CPU runs its probes synchronously: timed per call; the host's issue cost is measured.
    assert cal.timing == "per-call" and cal.issue_s is not None and cal.issue_s > 0
    assert f"host issue cost {cal.issue_s * 1e6:.1f} us per kernel" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--classes", "gemm"], "--classes 'gemm'"),
        (["--dtype", "fp64"], "--dtype 'fp64'"),
        (["--device", "tpu"], "--device 'tpu'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["calibrate", *args, "--out", str(tmp_path / "s")], capsys)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.rglob("*"))


def test_out_under_a_file_is_refused_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("x")
    code, _, err = _run(["calibrate", *QUICK, "--out", str(blocker / "c.json")], capsys)
    assert code == 2 and "--out" in err
