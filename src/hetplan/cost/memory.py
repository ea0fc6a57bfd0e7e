"""Memory needed by one pipeline stage (or one data-parallel replica) on one device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import DeviceType
from hetplan.cost.comm_buckets import layer_tensor_bytes
from hetplan.cost.dtypes import DTYPE_BYTES, is_mixed_precision
from hetplan.cost.tp import tp_output_share, tp_share
from hetplan.graph.types import LayerInfo
from hetplan.units import MiB

# Optimizer state slots per parameter (torch.optim): SGD without momentum keeps none, SGD
# with momentum one ``momentum_buffer``, Adam/AdamW ``exp_avg`` and ``exp_avg_sq``
# (PyTorch docs, torch.optim.SGD / Adam algorithm boxes). Kept in fp32.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
OPTIMIZER_STATE_BYTES = 4  # bytes per slot per parameter (fp32 state)
# Mixed precision (model dtype bf16 or fp16): the runtime trains under
# ``torch.autocast(device_type, dtype)`` over fp32 parameters (fp16 adds dynamic loss
# scaling, run/precision.py), as Micikevicius et al. 2018, "Mixed Precision Training", and the
# torch.amp docs ("Automatic Mixed Precision") describe. The graph is traced with the module
# cast to the dtype, so ``LayerInfo.param_bytes`` count 2 B per parameter; weights, gradients
# and communicated gradients are rescaled to fp32 (``weight_scale``, ``grad_scale``).
# (``MIXED_PRECISION_DTYPES``, ``DTYPE_BYTES`` and ``is_mixed_precision`` live in
# :mod:`hetplan.cost.dtypes`, imported here.)
# The parameters stay fp32 (autocast casts inside ops, never the module): the master weights.
MASTER_WEIGHT_BYTES = 4  # bytes per parameter (fp32 master weights under autocast)
# A gradient has its parameter's dtype (autograd's AccumulateGrad writes ``param.grad`` like
# ``param``): fp32 under autocast, so DDP buckets and PS pushes carry fp32 too.
MIXED_GRAD_BYTES = 4  # bytes per parameter (fp32 gradients under autocast)
# Autocast's cast weights: with ``cache_enabled=True`` (the default) the bf16/fp16 copy of an
# fp32 leaf tensor that requires grad, made for an op on autocast's lower-precision list (mm,
# addmm, linear, conv*, bmm, ...), is cached until the autocast region exits and is saved by
# autograd for that op's backward (torch/csrc/autograd/autocast_mode.cpp ``cached_cast``;
# ``torch.autocast`` docs, argument ``cache_enabled``). Embeddings and norms run in fp32 and
# are not cast. Charged for the parameters of layers with matmul/conv FLOPs (``fwd_flops >
# 0``: the graph's FLOPs come from torch's FlopCounterMode, which counts only matmul,
# convolution and attention ops), once per in-flight micro-batch: hetplan's runtime enters
# autocast per micro-batch forward (run/executor.py), so each forward casts anew and its
# autograd graph keeps its own copy until its backward (checked on torch 2.13: three
# forwards of an nn.Linear in three autocast regions save three bf16 weights, in one region
# one). With recomputation the forward saves nothing: one copy, during the recomputed one.
AUTOCAST_CAST_BYTES = 2  # bytes per parameter of a layer with matmul/conv FLOPs
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
    cast_cache: float = 0.0
    """Mixed precision: autocast's low-precision copies of the weights (0 in fp32)."""
    backward_workspace: float = 0.0
    """Gradients alive while one layer is differentiated (its output's and its input's)."""
    stage_inputs: float = 0.0
    """A later pipeline stage: the received inputs it keeps for each in-flight micro-batch's
    backward (to send their gradients back), beyond what its layers already save."""


# While autograd differentiates a layer, the gradient of its output and the gradient of its
# input are both alive (the first is freed after the layer's backward): two activation-sized
# buffers of one micro-batch on top of the saved activations (reverse-mode autodiff; measured
# with hetplan.run.memcount on gpt-tiny and resnet-tiny stages, docs/benchmarks.md).
BACKWARD_GRAD_BUFFERS = 2  # activation-sized buffers


def weight_scale(dtype: str) -> float:
    """Bytes of the trained weights per byte of ``param_bytes`` of a graph traced in
    ``dtype``: ``MASTER_WEIGHT_BYTES / DTYPE_BYTES[dtype]`` under mixed precision (4 / 2 = 2
    for bf16 and fp16: fp32 master weights), 1 in fp32."""
    if is_mixed_precision(dtype):
        return MASTER_WEIGHT_BYTES / DTYPE_BYTES[dtype]
    return 1.0


def grad_scale(dtype: str) -> float:
    """Bytes of the gradients (held, bucketed, all-reduced, pushed) per byte of
    ``param_bytes`` of a graph traced in ``dtype``: ``MIXED_GRAD_BYTES / DTYPE_BYTES[dtype]``
    under mixed precision (2 for bf16 and fp16: fp32 gradients), 1 in fp32."""
    if is_mixed_precision(dtype):
        return MIXED_GRAD_BYTES / DTYPE_BYTES[dtype]
    return 1.0


def cast_cache_bytes(layer: LayerInfo, dtype: str) -> float:
    """One autocast low-precision copy of the weights ``layer`` uses: ``AUTOCAST_CAST_BYTES``
    per parameter (its own and tied ones another layer owns, e.g. GPT-2's output projection)
    when mixed precision and the layer has matmul/conv FLOPs, else 0."""
    if not is_mixed_precision(dtype) or layer.fwd_flops <= 0:
        return 0.0
    return float((layer.params + layer.shared_params) * AUTOCAST_CAST_BYTES)


def grad_tensor_bytes(layers: Sequence[LayerInfo], dtype: str) -> list[tuple[int, ...]]:
    """Each layer's gradient tensor sizes as they are communicated (DDP buckets, PS push and
    pull): ``layer_tensor_bytes`` times ``grad_scale`` (fp32 gradients under autocast).
    The PS pull sends the fp32 master weights, the same bytes."""
    scale = grad_scale(dtype)
    sizes = layer_tensor_bytes(layers)
    if scale == 1.0:
        return sizes
    return [tuple(round(b * scale) for b in layer) for layer in sizes]


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
    dtype: str = "fp32",
    recompute: bool = False,
    stashed_versions: int = 0,
    tp: int = 1,
    bucket_bytes: float = 0,
    framework_bytes: float = FRAMEWORK_OVERHEAD_BYTES,
    input_bytes: float | None = None,
    received_bytes: float = 0.0,
) -> MemoryBreakdown:
    """Peak memory of a stage holding ``layers``.

    - weights = sum(param_bytes * share) * weight_scale(dtype), grads = sum(param_bytes *
      share) * grad_scale(dtype): the graph's parameter bytes in fp32; params * 4 B of fp32
      master weights and params * 4 B of fp32 gradients under mixed precision (``dtype``
      bf16/fp16: autocast over fp32 parameters),
    - optimizer = sum(params * share) * slots * 4: fp32 state slots (``OPTIMIZER_SLOTS``),
    - cast_cache (mixed precision) = params of the layers with FLOPs * share * 2 * copies:
      autocast's low-precision weight copies (``AUTOCAST_CAST_BYTES``), one per in-flight
      micro-batch (one with ``recompute``),
    - activations kept for backward = sum(saved_bytes * share) * micro_batch * in_flight;
      with ``recompute`` only the stage input (``input_bytes`` per sample, default the first
      layer's saved_bytes, which for conv/linear layers is their input) per in-flight
      micro-batch plus one micro-batch's full saved bytes (the one being recomputed); in
      the graph dtype (low precision under autocast, see docs/cost-models.md),
    - stashed_weights = stashed_versions * weights (PipeDream weight stashing, fp32 masters),
    - comm_buffers = ``bucket_bytes`` (DDP's flat gradient bucket copies),
    - framework = ``framework_bytes``,
    - stage_inputs (stages after the first) = max(``received_bytes`` - the first layer's
      ``saved_input_bytes``, 0) * micro_batch * in_flight: the values received across the cut
      (``received_bytes`` per sample, the graph's cut bytes) are held until each micro-batch's
      backward sends their gradients back; the part the stage's first layer saves anyway is
      already in the activations. Not with ``recompute`` (the stage input is counted there),
    - backward_workspace = ``BACKWARD_GRAD_BUFFERS`` * max(out_bytes * output share) *
      micro_batch.

    ``share`` is each layer's TP share (:func:`hetplan.cost.tp.tp_share`): ``1 / tp`` for a
    layer tensor parallelism splits (units or a vocabulary part, Megatron-style), 1 for a
    replicated one, which every TP rank holds whole (norms outside blocks, pooling, layers
    without units). The values crossing a cut, and a split block's output, are whole on every
    rank (all-reduced); a split vocabulary head's logits stay sharded (the output share).
    """
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; expected one of {tuple(OPTIMIZER_SLOTS)}"
        )
    if tp < 1 or micro_batch < 0 or in_flight < 0:
        raise ValueError(
            f"tp ({tp}) must be >= 1; micro_batch ({micro_batch}) and in_flight ({in_flight}) >= 0"
        )
    share = [tp_share(layer, tp) for layer in layers]
    param_bytes = sum(layer.param_bytes * f for layer, f in zip(layers, share, strict=True))
    weights = param_bytes * weight_scale(dtype)
    grads = param_bytes * grad_scale(dtype)
    params = sum(layer.params * f for layer, f in zip(layers, share, strict=True))
    per_param = OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
    copies = min(in_flight, 1) if recompute else in_flight
    cast = sum(cast_cache_bytes(layer, dtype) * f for layer, f in zip(layers, share, strict=True))
    cast *= copies
    saved = sum(layer.saved_bytes * f for layer, f in zip(layers, share, strict=True))
    if recompute and layers:
        stage_in = layers[0].saved_bytes if input_bytes is None else input_bytes
        activations = stage_in * micro_batch * in_flight + saved * micro_batch
    else:
        activations = saved * micro_batch * in_flight
    kept_in = 0.0
    if layers and not recompute:
        extra = max(received_bytes - layers[0].saved_input_bytes, 0.0)
        kept_in = extra * micro_batch * in_flight
    biggest_out = max((x.out_bytes * tp_output_share(x, tp) for x in layers), default=0)
    parts = {
        "weights": weights,
        "grads": grads,
        "optimizer": params * per_param,
        "cast_cache": cast,
        "activations": float(activations),
        "stashed_weights": stashed_versions * weights,
        "comm_buffers": float(bucket_bytes),
        "framework": float(framework_bytes),
        "stage_inputs": float(kept_in),
        "backward_workspace": float(BACKWARD_GRAD_BUFFERS * biggest_out * micro_batch),
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
