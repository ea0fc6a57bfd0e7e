"""The torch dtype of each training dtype (:data:`hetplan.planspec.dtypes.TORCH_NAMES`).

Imports torch: only modules that use torch anyway import this one (the graph tracer, the
runtime's autocast), never :mod:`hetplan.planspec` itself.
"""

from __future__ import annotations

import torch

from hetplan.planspec.dtypes import TORCH_NAMES

TORCH_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, attr) for name, attr in TORCH_NAMES.items()
}
