"""A checkpoint folder belongs to one run (issue 28): another run's folder is refused unless the
run resumes it or is told to overwrite it; model references compare as resolved paths; a resumed
run says where it resumed and that it keeps the checkpoint's seed. Real 2-rank runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import silent_data

from hetplan.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "examples" / "clusters" / "local-cpu.yaml")
DATA = Path(silent_data.__file__).resolve()


def _plan(path: Path, model: str) -> str:
    stage = {"layers": ["0", "1", "2"]}
    data = {
        "model": {"name": model},
        "strategy": "dp",
        "global_batch": 16,
        "micro_batches": 1,
        "pipelines": [
            {"batch": 8, "stages": [stage | {"devices": [dev]}]} for dev in ("local.0", "local.1")
        ],
    }
    path.write_text(json.dumps(data))
    return str(path)


def _train(
    capsys: pytest.CaptureFixture[str], plan: str, ckpt: Path, out: Path, *extra: str
) -> tuple[int, str, str]:
    argv = ["train", plan, "--cluster", LOCAL, "--data", f"{DATA}:plain", "--steps", "2"]
    argv += ["--warmup", "0", "--no-save-profile", "--out", str(out), "--checkpoint", str(ckpt)]
    with pytest.raises(SystemExit) as done:
        main([*argv, *extra])
    said = capsys.readouterr()
    return int(done.value.code or 0), said.out, said.err


def _steps(ckpt: Path) -> list[str]:
    return sorted(p.name for p in ckpt.glob("step-*"))


@pytest.mark.slow  # three real 2-rank runs: about 20-30 s
def test_a_checkpoint_folder_belongs_to_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "ck"
    absolute = _plan(tmp_path / "abs.json", f"{DATA}:model")
    code, _, err = _train(capsys, absolute, ckpt, tmp_path / "a.json", "--checkpoint-every", "1")
    assert code == 0, err
    assert _steps(ckpt) == ["step-00000001", "step-00000002"]
    latest = (ckpt / "latest").read_text()

    # A fresh run of the same plan, and a run of another model: refused, nothing touched.
    other = _plan(tmp_path / "other.json", f"{DATA}:wider")
    for plan in (absolute, other):
        code, out, err = _train(capsys, plan, ckpt, tmp_path / "refused.json")
        assert code == 2 and out == "", err
        assert err.count("\n") == 1
        assert f"--checkpoint {ckpt}: holds the checkpoints of another run" in err
        assert "--overwrite-checkpoint" in err
    assert (ckpt / "latest").read_text() == latest and not (tmp_path / "refused.json").exists()

    # The same model named relative to the working directory resumes it, keeping its seed.
    monkeypatch.chdir(DATA.parent)
    relative = _plan(tmp_path / "rel.json", f"./{DATA.name}:model")
    code, _, err = _train(
        capsys, relative, ckpt, tmp_path / "b.json", "--resume", str(ckpt), "--seed", "5"
    )
    assert code == 0, err
    assert f"resumed from step 2 ({ckpt / 'step-00000002'})" in err
    assert "--seed 5 ignored: a resumed run keeps its checkpoint's seed (0)" in err
    assert _steps(ckpt)[-1] == "step-00000004"

    # Told to overwrite: only the new run's checkpoint is left.
    code, _, err = _train(capsys, absolute, ckpt, tmp_path / "c.json", "--overwrite-checkpoint")
    assert code == 0, err
    assert _steps(ckpt) == ["step-00000002"]
    assert (ckpt / "latest").is_file()
