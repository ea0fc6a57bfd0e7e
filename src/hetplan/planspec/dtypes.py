"""Training dtypes, once: their names, bytes per element, torch names and mixed precision.

Imports nothing (not torch either, so that light commands start fast); the torch dtypes are
in :mod:`hetplan.planspec.torch_dtypes`, which only torch users import.
"""

from __future__ import annotations

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # bytes per element
"""Every dtype hetplan names; tf32 is fp32 storage with TF32 tensor-core math (a device's
``peak_tflops`` key, never a model dtype)."""
TORCH_NAMES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
"""The torch attribute of each dtype a model can be traced and trained in."""
TRAINING_DTYPES: tuple[str, ...] = tuple(TORCH_NAMES)
"""A plan's ``model.dtype`` (``--dtype``): fp32, fp16, bf16."""
PEAK_DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
"""Keys of a device type's ``peak_tflops``."""
MIXED_PRECISION_DTYPES: tuple[str, ...] = ("bf16", "fp16")
"""Mixed precision: the runtime trains under ``torch.autocast(device_type, dtype)`` over fp32
parameters (Micikevicius et al. 2018; see :mod:`hetplan.cost.memory`)."""
FP32_BYTES = DTYPE_BYTES["fp32"]  # bytes per element of fp32 (master weights, gradients)


def is_mixed_precision(dtype: str) -> bool:
    """bf16 and fp16 train under autocast over fp32 master weights; fp32 (and tf32) do not."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(DTYPE_BYTES)}")
    return dtype in MIXED_PRECISION_DTYPES
