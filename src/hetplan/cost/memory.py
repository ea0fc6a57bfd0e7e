"""Memory needed by one pipeline stage (or one data-parallel replica) on one device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import DeviceType
from hetplan.graph.types import LayerInfo
from hetplan.units import MiB

# Optimizer state slots per parameter (torch.optim): SGD without momentum keeps none, SGD
# with momentum one ``momentum_buffer``, Adam/AdamW ``exp_avg`` and ``exp_avg_sq``
# (PyTorch docs, torch.optim.SGD / Adam algorithm boxes). Kept in fp32.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
OPTIMIZER_STATE_BYTES = 4  # bytes per slot per parameter (fp32 state)
# Mixed precision keeps an fp32 master copy of 16-bit weights (Micikevicius et al. 2018,
# "Mixed Precision Training"; torch.amp keeps fp32 params and casts, same total).
MASTER_COPY_BYTES = 4  # bytes per parameter when dtype_bytes < 4
# CUDA context + cuBLAS/cuDNN workspaces + caching-allocator slack on a GPU: the context
# alone takes ~300-500 MB on recent GPUs (CUDA lazy loading, CUDA >= 11.7, cuts it to the
# low hundreds of MB); we reserve 512 MiB in total. Override per device/cluster.
FRAMEWORK_OVERHEAD_BYTES = 512 * MiB  # bytes per GPU process
# A CPU process: the interpreter and torch libraries live in host memory that the device
# capacity figure of a CPU "device" already excludes; keep a small allowance.
CPU_FRAMEWORK_OVERHEAD_BYTES = 64 * MiB  # bytes per CPU process

STRATEGIES = ("dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid")


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes a stage needs on its device, by kind."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    stashed_weights: float
    comm_buffers: float
    framework: float
    total: float


DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # bytes per element


def is_gpu(device_type: DeviceType) -> bool:
    """CPU "devices" (catalog name ``cpu...``) get the small framework allowance."""
    return not device_type.name.lower().startswith("cpu")


def framework_overhead_bytes(is_gpu: bool) -> float:
    """The default framework allowance for a GPU or CPU process."""
    return FRAMEWORK_OVERHEAD_BYTES if is_gpu else CPU_FRAMEWORK_OVERHEAD_BYTES


def stage_memory(
    layers: Sequence[LayerInfo],
    *,
    micro_batch: int,
    in_flight: int,
    optimizer: str,
    dtype_bytes: int = 4,
    recompute: bool = False,
    stashed_versions: int = 0,
    tp: int = 1,
    bucket_bytes: float = 0,
    framework_bytes: float = FRAMEWORK_OVERHEAD_BYTES,
    input_bytes: float | None = None,
) -> MemoryBreakdown:
    """Peak memory of a stage holding ``layers``.

    - weights = grads = sum(param_bytes) / tp,
    - optimizer = params / tp * (slots * 4 + (4 if dtype_bytes < 4 else 0)): fp32 state
      slots (``OPTIMIZER_SLOTS``) plus an fp32 master copy for 16-bit weights,
    - activations kept for backward = sum(saved_bytes) * micro_batch * in_flight / tp;
      with ``recompute`` only the stage input (``input_bytes`` per sample, default the first
      layer's saved_bytes, which for conv/linear layers is their input) per in-flight
      micro-batch plus one micro-batch's full saved bytes (the one being recomputed),
    - stashed_weights = stashed_versions * weights (PipeDream weight stashing),
    - comm_buffers = ``bucket_bytes`` (DDP's flat gradient bucket copies),
    - framework = ``framework_bytes``.

    TP divides weights and activations by ``tp`` (Megatron splits the attention heads and
    the MLP hidden dimension; replicated layer norms and dropout masks are ignored).
    """
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; expected one of {tuple(OPTIMIZER_SLOTS)}"
        )
    if tp < 1 or micro_batch < 0 or in_flight < 0:
        raise ValueError(
            f"tp ({tp}) must be >= 1; micro_batch ({micro_batch}) and in_flight ({in_flight}) >= 0"
        )
    weights = sum(layer.param_bytes for layer in layers) / tp
    params = sum(layer.params for layer in layers) / tp
    per_param = OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
    if dtype_bytes < 4:
        per_param += MASTER_COPY_BYTES
    saved = sum(layer.saved_bytes for layer in layers)
    if recompute and layers:
        stage_in = layers[0].saved_bytes if input_bytes is None else input_bytes
        activations = (stage_in * micro_batch * in_flight + saved * micro_batch) / tp
    else:
        activations = saved * micro_batch * in_flight / tp
    parts = {
        "weights": weights,
        "grads": weights,
        "optimizer": params * per_param,
        "activations": float(activations),
        "stashed_weights": stashed_versions * weights,
        "comm_buffers": float(bucket_bytes),
        "framework": float(framework_bytes),
    }
    return MemoryBreakdown(**parts, total=sum(parts.values()))


def in_flight_microbatches(strategy: str, stage: int, num_stages: int, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at its peak.

    - ``gpipe``: all ``micro_batches`` (all forwards before any backward; GPipe, Huang et al.
      2019),
    - ``1f1b`` (and ``hybrid``, whose virtual workers pipeline the same way):
      ``min(num_stages - stage, micro_batches)``, the warm-up depth of PipeDream-Flush
      (Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training"),
    - ``pipedream`` (asynchronous): ``num_stages - stage`` (PipeDream, Narayanan et al. 2019),
    - ``dp`` / ``ps``: 1.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    if not 0 <= stage < max(num_stages, 1):
        raise ValueError(f"stage {stage} out of range for {num_stages} stages")
    if strategy in ("dp", "ps"):
        return 1
    if strategy == "gpipe":
        return micro_batches
    if strategy == "pipedream":
        return num_stages - stage
    return min(num_stages - stage, micro_batches)


def stashed_weight_versions(stage: int, num_stages: int) -> int:
    """Extra weight versions stage ``stage`` stashes in asynchronous PipeDream:
    ``num_stages - stage - 1`` (one per micro-batch in flight beyond the current one)."""
    return max(num_stages - stage - 1, 0)
