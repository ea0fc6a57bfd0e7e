"""Training dtypes: bytes per element and which ones train under mixed precision.

Kept apart from :mod:`hetplan.cost.memory` so that the cost models it uses (tensor
parallelism, :mod:`hetplan.cost.tp`) can read them without importing the memory model.
"""

from __future__ import annotations

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # bytes per element
# Mixed precision (model dtype bf16 or fp16): the runtime trains under
# ``torch.autocast(device_type, dtype)`` over fp32 parameters (see :mod:`hetplan.cost.memory`).
MIXED_PRECISION_DTYPES = ("bf16", "fp16")


def is_mixed_precision(dtype: str) -> bool:
    """bf16 and fp16 train under autocast over fp32 master weights; fp32 (and tf32) do not."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(DTYPE_BYTES)}")
    return dtype in MIXED_PRECISION_DTYPES
