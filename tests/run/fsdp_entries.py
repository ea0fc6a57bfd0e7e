"""A model source that logs how many bytes each ``build_part`` call materialises (sharded
set-up: no rank may build a whole replica). Importable by the rank processes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch import nn

from hetplan.run.setup.model import ZooSource


@dataclass(frozen=True, kw_only=True)
class CountingSource(ZooSource):
    log: str = ""
    """Path prefix: each process appends the bytes of every call to ``<log>.<pid>``."""

    def build_part(self, seed: int, device: str, names: list[str] | None) -> nn.Module:
        module = super().build_part(seed, device, names)
        tensors = [*module.parameters(), *module.buffers()]
        real = sum(t.numel() * t.element_size() for t in tensors if not t.is_meta)
        with open(f"{self.log}.{os.getpid()}", "a") as f:
            f.write(f"{real}\n")
        return module
