"""Inputs that need no model are refused before the model is traced (issue 28: a bad cluster
file or plan option took 3.5-8 s to refuse): exit 2, one line naming the field or option,
nothing written, and the tracer never called."""

from __future__ import annotations

from pathlib import Path

import pytest

import hetplan.graph
from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HETERO = str(CLUSTERS / "hetero-2node.yaml")
VGG = ["--model", "vgg16", "--dataset", "imagenet"]
BAD_CLUSTER = "name: broken\nnodes: 3\n"
"""A cluster file whose ``nodes`` is not a list."""


def _cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, text the one line must contain); ``tmp`` holds the inputs made."""
    bad = str(tmp / "bad.yaml")
    afile = str(tmp / "a-file")
    out = ["--out", str(tmp / "work" / "out.json")]
    return {
        "plan, bad cluster file": (["plan", *VGG, "--cluster", bad, *out], "nodes: "),
        "predict, bad cluster file": (
            ["predict", *VGG, "--strategy", "dp", "--cluster", bad, *out], "nodes: "),
        "tune, bad cluster file": (["tune", *VGG, "--cluster", bad, *out], "nodes: "),
        "predict, unknown --strategy": (
            ["predict", *VGG, "--strategy", "dq", "--cluster", HETERO], "--strategy: 'dq'"),
        "predict, unknown --devices id": (
            ["predict", *VGG, "--strategy", "dp", "--devices", "v100.0,v100.9",
             "--cluster", HETERO, *out], "unknown device id 'v100.9'"),
        "predict, unknown --ps-devices id": (
            ["predict", *VGG, "--strategy", "ps", "--ps-devices", "t4.7", "--cluster", HETERO,
             *out], "unknown device id 't4.7'"),
        "predict, more devices than the cluster's": (
            ["predict", *VGG, "--strategy", "hybrid", "--dp", "3", "--pp", "3",
             "--cluster", HETERO, *out], "needs 9 devices, 8 given"),
        "predict, --profiles is a file": (
            ["predict", *VGG, "--strategy", "dp", "--cluster", HETERO, "--profiles", afile,
             *out], f"--profiles {afile}: is a file"),
        "plan, --profiles is a file": (
            ["plan", *VGG, "--cluster", HETERO, "--profiles", afile, *out],
            f"--profiles {afile}: is a file"),
        "tune, --lr -1": (["tune", *VGG, "--cluster", HETERO, "--lr", "-1", *out],
                          "--lr must be > 0 (got -1)"),
        "tune, --checkpoint is a file": (
            ["tune", *VGG, "--cluster", HETERO, "--checkpoint", afile, *out],
            f"--checkpoint {afile}: is a file"),
    }  # fmt: skip


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The models the tracer was asked for (it refuses them all: none should be)."""
    calls: list[object] = []

    def no_trace(model: object, *args: object, **kwargs: object) -> None:
        calls.append(model)
        raise AssertionError(f"traced {model}")

    monkeypatch.setattr(hetplan.graph, "build_graph", no_trace)
    return calls


@pytest.mark.parametrize("name", list(_cases(Path())))
def test_refused_before_the_model_is_traced(
    name: str, tmp_path: Path, traced: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_text(BAD_CLUSTER)
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "work").mkdir()
    argv, expected = _cases(tmp_path)[name]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert traced == []
    assert exc.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("hetplan: error: "), err
    assert expected in err, err
    assert not list((tmp_path / "work").iterdir())
