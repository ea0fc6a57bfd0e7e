"""Resolving custom models from files and modules, and the one-line errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from hetplan.errors import ModelError
from hetplan.graph import build_graph, resolve_model
from hetplan.planspec import ModelRef

MODELS = """
import torch
from torch import nn

def tensor_input():
    return nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3)), torch.randn(5, 6)

def shape_input():
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 2)), (3, 4)

def bare():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())

def tokens():
    return nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 50)), torch.zeros(2, 7, dtype=torch.long)

def regress():
    return nn.Linear(5, 5), (6, 5)

def boom():
    raise RuntimeError("no weights here")

def wrong():
    return 42

NOT_CALLABLE = 3
"""


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "my_models.py"
    path.write_text(textwrap.dedent(MODELS))
    return path


def test_file_function_with_example_input(models_file: Path) -> None:
    built = resolve_model(f"{models_file}:tensor_input")
    assert built.input_shape == (6,) and built.task == "classify" and built.num_classes == 3
    g = build_graph(f"{models_file}:tensor_input")
    assert [layer.name for layer in g.layers] == ["0", "1", "2"]
    assert g.total_params == 6 * 4 + 4 + 4 * 3 + 3
    assert g.total_fwd_flops == 2 * 6 * 4 + 2 * 4 * 3


def test_file_function_with_input_shape(models_file: Path) -> None:
    built = resolve_model(f"{models_file}:shape_input")
    assert built.input_shape == (3, 4) and built.num_classes == 2


def test_bare_module_uses_the_dataset(models_file: Path) -> None:
    built = resolve_model(f"{models_file}:bare", "cifar10")
    assert built.input_shape == (3, 32, 32) and built.num_classes == 4
    with pytest.raises(ModelError, match="bare module; give --dataset"):
        resolve_model(f"{models_file}:bare")


def test_token_model_is_a_language_model(models_file: Path) -> None:
    built = resolve_model(f"{models_file}:tokens")
    assert built.input_dtype == torch.long and built.input_high == 50
    assert built.task == "lm" and built.target_shape == (7,) and built.num_classes == 50


def test_other_outputs_regress(models_file: Path) -> None:
    built = resolve_model(f"{models_file}:regress")
    assert built.task == "regress" and built.target_shape == (6, 5)
    g = build_graph(f"{models_file}:regress")
    assert g.total_params == 30 and [layer.name for layer in g.layers] == [""]


def test_relative_file_path(models_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(models_file.parent)
    assert resolve_model("./my_models.py:shape_input").input_shape == (3, 4)


def test_package_module_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "hetplan_test_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent(MODELS))
    monkeypatch.syspath_prepend(str(tmp_path))
    built = resolve_model("hetplan_test_pkg.nets:tensor_input")
    assert built.family == "custom" and built.input_shape == (6,)
    with pytest.raises(ModelError, match=r"^hetplan_test_pkg.nope: module not found"):
        resolve_model("hetplan_test_pkg.nope:fn")


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        (":boom", r"my_models.py:boom: the function raised RuntimeError: no weights here$"),
        (":wrong", r"my_models.py:wrong: returned an int; expected an nn.Module"),
        (":missing", r"my_models.py: no function 'missing' \(callables there: .*boom"),
        (":NOT_CALLABLE", r"my_models.py: no function 'NOT_CALLABLE'"),
    ],
)
def test_function_errors_name_the_place(models_file: Path, suffix: str, message: str) -> None:
    with pytest.raises(ModelError, match=message) as info:
        resolve_model(f"{models_file}{suffix}")
    assert "\n" not in str(info.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"nothere.py: file not found"):
        resolve_model(f"{tmp_path}/nothere.py:fn")
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ModelError, match=r"broken.py: importing failed: ModuleNotFoundError"):
        resolve_model(f"{broken}:fn")


@pytest.mark.parametrize(
    ("name", "dataset", "message"),
    [
        ("resnet5", None, r"unknown model 'resnet5' \(did you mean 'resnet50'\?\)"),
        ("resnet50", "svhn", r"unknown dataset 'svhn'; expected one of mnist, cifar10"),
        ("gpt2", "imagenet", r"language models take no dataset"),
        ("gpt:layers=2,hidden=65,heads=4", None, r"hidden \(65\) must be divisible by heads"),
        ("gpt:depth=3", None, r"bad option 'depth=3'"),
        ("resnet50:layers=3", None, r"vision models take no options"),
    ],
)
def test_zoo_errors(name: str, dataset: str | None, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        resolve_model(name, dataset)


def test_model_ref_and_aliases() -> None:
    ref = ModelRef(name="resnet-tiny", dataset="mnist", depth=2)
    g = build_graph(ref)
    assert g.input_shape == (1, 28, 28) and g.depth == 2
    assert g is build_graph(ref)  # cached
    assert resolve_model("gpt2-small").input_shape == (1024,)


def test_bad_graph_arguments() -> None:
    with pytest.raises(ModelError, match="dtype 'fp8'"):
        build_graph("resnet-tiny", dtype="fp8")
    with pytest.raises(ModelError, match="depth must be >= 1"):
        build_graph("resnet-tiny", depth=0)
