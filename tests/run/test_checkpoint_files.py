"""Checkpoint files in one process: what is saved and restored, the atomic publish, and how
a directory of checkpoints is resolved."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from hetplan.errors import InputError
from hetplan.run.setup.checkpoint import (
    LATEST,
    CheckpointInfo,
    find_checkpoint,
    load_checkpoint,
    read_info,
    save_checkpoint,
    step_dir,
)


def _trained(optimizer: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=0.1)
        if optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(8, 4)).square().mean().backward()
        opt.step()
    return model, opt


def _info(step: int) -> CheckpointInfo:
    return CheckpointInfo(step=step, position=8 * step, seed=1, model="m", optimizer="adam")


@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_a_resumed_optimizer_steps_exactly_as_the_original(optimizer: str, tmp_path: Path) -> None:
    model, opt = _trained(optimizer)
    save_checkpoint(tmp_path, _info(2), model, opt, {})
    fresh, fresh_opt = _trained(optimizer)  # same shapes, then overwritten
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    fresh_opt.state.clear()
    info = load_checkpoint(find_checkpoint(tmp_path), fresh, fresh_opt, {})
    assert (info.step, info.position) == (2, 16)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # running stats included
    x = torch.randn(8, 4)
    for m, o in ((model, opt), (fresh, fresh_opt)):
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_latest_names_the_newest_and_a_resave_replaces_a_step(tmp_path: Path) -> None:
    model, opt = _trained("adam")
    save_checkpoint(tmp_path, _info(2), model, opt, {})
    save_checkpoint(tmp_path, _info(4), model, opt, {})
    assert (tmp_path / LATEST).read_text().strip() == "step-00000004"
    save_checkpoint(tmp_path, CheckpointInfo(**{**vars(_info(4)), "position": 99}), model, opt, {})
    assert read_info(find_checkpoint(tmp_path)).position == 99
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [LATEST, "step-00000002", "step-00000004"]  # nothing left aside


def test_a_pointer_to_a_missing_folder_falls_back_to_the_newest_complete(tmp_path: Path) -> None:
    model, opt = _trained("adam")
    save_checkpoint(tmp_path, _info(2), model, opt, {})
    save_checkpoint(tmp_path, _info(4), model, opt, {})
    (tmp_path / LATEST).write_text("step-00000006\n")  # a crash between renames
    (tmp_path / ".tmp-step-00000006").mkdir()  # a torn write: never read
    assert find_checkpoint(tmp_path) == step_dir(tmp_path, 4)
    assert find_checkpoint(step_dir(tmp_path, 2)) == step_dir(tmp_path, 2)


def test_no_checkpoint_and_a_missing_parameter_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no checkpoint there"):
        find_checkpoint(tmp_path)
    model, opt = _trained("adam")
    save_checkpoint(tmp_path, _info(2), model, opt, {})
    path = find_checkpoint(tmp_path)
    bigger = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2), nn.Linear(2, 2))
    with pytest.raises(InputError, match=r"no 3\.weight in the checkpoint"):
        load_checkpoint(path, bigger, torch.optim.Adam(bigger.parameters()), {})
    wider = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 5))
    with pytest.raises(InputError, match=r"2\.weight has shape \(2, 3\) in the checkpoint"):
        load_checkpoint(path, wider, torch.optim.Adam(wider.parameters()), {})
