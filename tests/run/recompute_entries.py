"""A model that counts its forwards, for the recomputation tests (imported by the ranks
through PYTHONPATH)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hetplan.run.setup.model import MLPSource


def _count(folder: str, name: str, module: nn.Module, args: Any, output: Any) -> None:
    """Append ``name`` to ``folder/<pid>`` for every forward on real tensors (a recomputed
    one included: ``torch.utils.checkpoint`` runs the module again)."""
    del module, args
    if isinstance(output, torch.Tensor) and not output.is_meta:
        with (Path(folder) / str(os.getpid())).open("a") as f:
            f.write(name + "\n")


@dataclass(frozen=True, kw_only=True)
class CountingSource(MLPSource):
    """An :class:`MLPSource` whose linear layers count their forwards in ``folder``."""

    folder: str = ""

    def build(self, seed: int, device: str) -> nn.Module:
        model = super().build(seed, device)
        if self.folder and device != "meta":
            for name, mod in model.named_modules():
                if isinstance(mod, nn.Linear):
                    mod.register_forward_hook(partial(_count, self.folder, name))
        return model
