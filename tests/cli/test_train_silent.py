"""Training that would go wrong without a word (issue 28): the ranks' warnings reach the
command, a non-finite loss stops the run naming the step, the rank and the checkpoint to resume
from, the default loss refuses targets it would broadcast, a dataset smaller than one batch is
an input error. Real 2-rank runs (gloo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import silent_data

from hetplan.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "examples" / "clusters" / "local-cpu.yaml")
DATA = str(Path(silent_data.__file__).resolve())


def _plan(tmp_path: Path) -> str:
    """Data parallel on the two local CPU ranks, 8 samples each, one micro-batch."""
    stage = {"layers": ["0", "1", "2"]}
    data = {
        "model": {"name": f"{DATA}:model"},
        "strategy": "dp",
        "global_batch": 16,
        "micro_batches": 1,
        "pipelines": [
            {"batch": 8, "stages": [stage | {"devices": [dev]}]} for dev in ("local.0", "local.1")
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return str(path)


def _train(
    tmp_path: Path, fn: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    argv = ["train", _plan(tmp_path), "--cluster", LOCAL, "--data", f"{DATA}:{fn}"]
    argv += ["--steps", "4", "--warmup", "0", "--no-save-profile"]
    argv += ["--out", str(tmp_path / "m.json"), *extra]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


@pytest.mark.slow  # a real 2-rank run: about 5-10 s
def test_a_warning_of_the_ranks_is_shown_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _train(tmp_path, "warns", capsys)
    assert code == 0, err
    # Raised by both ranks in each of the 4 steps: shown once, naming a rank and the category.
    assert err.count(silent_data.WARNING) == 1, err
    assert "warning from rank" in err and "UserWarning" in err


@pytest.mark.slow  # a real 2-rank run that stops at its third step
def test_a_nan_loss_stops_the_run_naming_step_rank_and_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "ck"
    code, _, err = _train(
        tmp_path, "diverges", capsys, "--checkpoint", str(ckpt), "--checkpoint-every", "1"
    )
    # Each rank computes one loss per step: the third call, step 2, is NaN.
    nan_step = silent_data.NAN_AT_CALL - 1
    assert code == 2
    line = err.strip()
    assert "\n" not in line, err
    assert "failed" in line and "rank " in line and f"loss is nan at step {nan_step}" in line
    # The last checkpoint written is the one before the NaN step: its state is good.
    assert f"resume with --resume {ckpt / f'step-{nan_step:08d}'}" in line
    assert not (ckpt / f"step-{nan_step + 1:08d}").exists()


@pytest.mark.slow  # a real 2-rank run that fails in its first step
def test_the_default_loss_refuses_targets_it_would_broadcast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _train(tmp_path, "broadcast", capsys)
    assert code == 2
    assert "targets of shape (8, 8, 8)" in err and "outputs of shape (8, 1, 8, 8)" in err
    assert err.count("\n") == 1


def test_a_dataset_smaller_than_one_batch_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _train(tmp_path, "tiny", capsys)
    assert code == 2 and out == ""
    assert "holds 5 samples, fewer than one global batch of the plan (16)" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "m.json").exists()
