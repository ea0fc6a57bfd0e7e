"""``--dtype`` on ``hetplan plan`` and ``hetplan predict``: written into the plan's
``model.dtype``, read back by ``predict``; bad values exit 2 naming the option."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = str(CLUSTERS / "local-cpu.yaml")
GPT = ["--model", "gpt-tiny", "--batch", "8", "--optimizer", "adam", "--strategies", "dp"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out.out, out.err


def _predict(plan: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, text, err = _run(["predict", "--plan", str(plan), "--cluster", LOCAL, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(text)
    return data


@pytest.fixture(scope="module")
def bf16_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dtype") / "plan.json"
    with pytest.raises(SystemExit) as exc:
        main(["plan", *GPT, "--cluster", LOCAL, "--dtype", "bf16", "--out", str(out), "--json"])
    assert exc.value.code in (0, None)
    return out


def test_plan_writes_the_dtype_and_predict_reads_it(
    bf16_plan: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(bf16_plan.read_text())
    assert data["model"]["dtype"] == "bf16"
    fp32_plan = tmp_path / "fp32.json"
    data["model"]["dtype"] = "fp32"
    fp32_plan.write_text(json.dumps(data))
    mixed, full = _predict(bf16_plan, capsys), _predict(fp32_plan, capsys)
    for m, f in zip(mixed["devices"], full["devices"], strict=True):
        mm, fm = m["memory"], f["memory"]
        # fp32 master weights and Adam state in both; autocast's weight copies only in the
        # bf16 plan. Gradients and buckets are fp32 in both: at most one fp32 copy of the
        # weights each, whichever phase of the step is the peak (predict/backward_peak.py).
        assert mm["weights"] == fm["weights"]
        assert mm["optimizer"] == fm["optimizer"] == 2 * fm["weights"]
        for held in (mm, fm):
            assert held.get("grads", 0) <= fm["weights"]
            assert held.get("comm_buffers", 0) <= fm["weights"]
        assert fm.get("cast_cache", 0) == 0 < mm["cast_cache"] < fm["weights"] / 2
        assert m["memory_bytes"] < f["memory_bytes"] + mm["cast_cache"]  # half activations


def test_predict_builds_a_mixed_precision_plan(
    bf16_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", "--model", "gpt-tiny", "--strategy", "dp", "--cluster", LOCAL]
    argv += ["--batch", "8", "--optimizer", "adam", "--json"]
    code, text, err = _run([*argv, "--dtype", "bf16"], capsys)
    assert code == 0, err
    built = json.loads(text)
    from_file = _predict(bf16_plan, capsys)
    # Both replicate the whole model on both devices: the same autocast weight copies.
    assert [(d["id"], d["memory"]["cast_cache"]) for d in built["devices"]] == [
        (d["id"], d["memory"]["cast_cache"]) for d in from_file["devices"]
    ]
    assert all(d["memory"]["cast_cache"] > 0 for d in built["devices"])
    code, text, err = _run(argv, capsys)  # default fp32
    assert code == 0, err
    assert all(d["memory"]["cast_cache"] == 0 for d in json.loads(text)["devices"])


@pytest.mark.parametrize("command", ["plan", "predict"])
def test_bad_dtype_exits_2_naming_the_option(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    argv = [command, "--model", "gpt-tiny", "--cluster", LOCAL, "--dtype", "fp8"]
    argv += ["--out", str(out)] if command == "plan" else ["--strategy", "dp"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "--dtype" in err and "fp8" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_dtype_with_a_plan_file_is_refused(
    bf16_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["predict", "--plan", str(bf16_plan), "--cluster", LOCAL, "--dtype", "bf16"]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "--dtype" in err and "--plan" in err


@pytest.mark.parametrize("command", ["plan", "predict"])
def test_help_says_what_mixed_precision_means(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, _ = _run([command, "--help"], capsys)
    assert code == 0
    flat = "".join(text.replace("│", " ").split())
    phrase = "mixed precision: autocast over fp32 master weights (fp16 adds a loss scaler)"
    assert "".join(phrase.split()) in flat


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_plan_in_low_precision_trains_end_to_end(
    dtype: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``plan --dtype`` searches in that precision and ``train`` runs the plan under it."""
    plan, out = tmp_path / "plan.json", tmp_path / "m.json"
    argv = ["plan", *GPT, "--cluster", LOCAL, "--dtype", dtype, "--out", str(plan), "--json"]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert json.loads(plan.read_text())["model"]["dtype"] == dtype
    argv = ["train", str(plan), "--cluster", LOCAL, "--steps", "2", "--warmup", "0"]
    code, _, err = _run([*argv, "--out", str(out), "--no-save-profile"], capsys)
    assert code == 0, err
    measured = json.loads(out.read_text())
    assert measured["measured_iteration_s"] > 0
    # The run trained the plan it was given, in its precision (the executor's autocast over
    # fp32 weights is checked against a single-process run in tests/run/test_run_fidelity).
    assert measured["plan"]["model"]["dtype"] == dtype
