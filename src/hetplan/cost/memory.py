"""Memory needed by one pipeline stage (or one data-parallel replica) on one device.

The model is per layer (:func:`layer_bytes`: numpy arrays over the layers) plus a few
stage-level terms; :func:`stage_memory` sums it over a stage for the prediction, and the
planner's screening (``plan.pricing.Pricing.layer_mem``) sums the same arrays over the
partitioner's layer ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.comm_buckets import layer_tensor_bytes
from hetplan.cost.dtensor import tp_step_host_s
from hetplan.cost.roofline import roofline_time
from hetplan.cost.tp import tp_output_share, tp_share
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.planspec.dtypes import DTYPE_BYTES, FP32_BYTES, is_mixed_precision
from hetplan.planspec.order import RecomputeHeld
from hetplan.units import MiB

Floats = NDArray[np.float64]

# Optimizer state slots per parameter (torch.optim): SGD without momentum keeps none, SGD
# with momentum one ``momentum_buffer``, Adam/AdamW ``exp_avg`` and ``exp_avg_sq``
# (PyTorch docs, torch.optim.SGD / Adam algorithm boxes). Kept in fp32.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}
OPTIMIZER_STATE_BYTES = FP32_BYTES  # bytes per slot per parameter (fp32 state)
# Bytes moved per parameter by one optimizer step (fp32 p, g and state: in fp32 and under
# mixed precision's fp32 master weights alike): SGD reads p, g and writes p (3 x 4 B);
# momentum adds the buffer read and write (5 x 4 B); Adam reads p, g, m, v and writes p, m, v
# (7 x 4 B). Source: torch.optim's update rules (foreach kernels are memory-bound elementwise
# ops). Priced by :func:`optimizer_step_s`, for the screening and the simulator alike.
OPTIMIZER_BYTES_PER_PARAM = {  # bytes/param: p, g read and p written, + each slot read and written
    name: float((3 + 2 * slots) * OPTIMIZER_STATE_BYTES) for name, slots in OPTIMIZER_SLOTS.items()
}
# Mixed precision (model dtype bf16 or fp16): the runtime trains under
# ``torch.autocast(device_type, dtype)`` over fp32 parameters (fp16 adds dynamic loss
# scaling, run/setup/precision.py), as Micikevicius et al. 2018, "Mixed Precision Training", and the
# torch.amp docs ("Automatic Mixed Precision") describe. The graph is traced with the module
# cast to the dtype, so ``LayerInfo.param_bytes`` count 2 B per parameter; weights, gradients
# and communicated gradients are rescaled to fp32 (``weight_scale``, ``grad_scale``).
# (``MIXED_PRECISION_DTYPES``, ``DTYPE_BYTES`` and ``is_mixed_precision`` live in
# :mod:`hetplan.planspec.dtypes`, the one dtype table.)
# The parameters stay fp32 (autocast casts inside ops, never the module): the master weights.
MASTER_WEIGHT_BYTES = FP32_BYTES  # bytes per parameter (fp32 master weights under autocast)
# A gradient has its parameter's dtype (autograd's AccumulateGrad writes ``param.grad`` like
# ``param``): fp32 under autocast, so DDP buckets and PS pushes carry fp32 too.
MIXED_GRAD_BYTES = FP32_BYTES  # bytes per parameter (fp32 gradients under autocast)
# Autocast's cast weights: with ``cache_enabled=True`` (the default) the bf16/fp16 copy of an
# fp32 leaf tensor that requires grad, made for an op on autocast's lower-precision list (mm,
# addmm, linear, conv*, bmm, ...), is cached until the autocast region exits and is saved by
# autograd for that op's backward (torch/csrc/autograd/autocast_mode.cpp ``cached_cast``;
# ``torch.autocast`` docs, argument ``cache_enabled``). Embeddings and norms run in fp32 and
# are not cast. Charged for the parameters of layers with matmul/conv FLOPs (``fwd_flops >
# 0``: the graph's FLOPs come from torch's FlopCounterMode, which counts only matmul,
# convolution and attention ops), once per in-flight micro-batch: hetplan's runtime enters
# autocast per micro-batch forward (run/execute/executor.py), so each forward casts anew and its
# autograd graph keeps its own copy until its backward (checked on torch 2.13: three
# forwards of an nn.Linear in three autocast regions save three bf16 weights, in one region
# one). With recomputation the forward saves nothing: one copy, during the recomputed one
# (and one per micro-batch not checkpointed, ``except_last``: ``RecomputeHeld.whole``).
AUTOCAST_CAST_BYTES = 2  # bytes per parameter of a layer with matmul/conv FLOPs
# Autocast runs the loss's log-softmax in fp32 (``log_softmax``, ``nll_loss`` and
# ``cross_entropy`` are on autocast's float32 list: torch.amp docs, "CUDA Ops that can autocast
# to float32"), and autograd keeps its fp32 output for the backward. The graph is traced in the
# low precision without autocast, so its ``saved_bytes`` hold that output at 2 B per logit:
# the runtime keeps ``LOSS_SOFTMAX_BYTES - 2`` more per logit. On the H100 (gpu-truth, GPT-2
# bf16, batch 16, 1024 x 50257 logits per sample) this is 1.65 GB of the 3.10 GB the
# prediction missed (docs/benchmarks.md, memory).
LOSS_SOFTMAX_BYTES = FP32_BYTES  # bytes per logit of the saved log-softmax under autocast
# CUDA context + cuBLAS/cuDNN workspaces + caching-allocator slack on a GPU: the context
# alone takes ~300-500 MB on recent GPUs (CUDA lazy loading, CUDA >= 11.7, cuts it to the
# low hundreds of MB); we reserve 512 MiB in total. Override per device/cluster.
FRAMEWORK_OVERHEAD_BYTES = 512 * MiB  # bytes per GPU process
# A CPU process: the interpreter and torch libraries live in host memory that the device
# capacity figure of a CPU "device" already excludes; keep a small allowance.
CPU_FRAMEWORK_OVERHEAD_BYTES = 64 * MiB  # bytes per CPU process


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
    autocast_loss: float = 0.0
    """Mixed precision, the stage holding the model's last layer: the fp32 log-softmax of the
    loss kept per in-flight micro-batch beyond what the traced graph counts
    (:func:`autocast_loss_bytes`)."""
    input_batch: float = 0.0
    """A stage that reads data (the first and the last): the input batches it holds beyond
    the micro-batch inputs its activations already count (:func:`input_batch_bytes`)."""
    gathered: float = 0.0
    """Sharded data parallelism: layers' weights gathered at once beside the shards
    (:mod:`hetplan.cost.sharded`)."""
    optimizer_step: float = 0.0
    """The optimizer step's temporaries, where the step is the stage's peak
    (:mod:`hetplan.cost.optimizer_step`)."""

    def with_terms(self, **terms: float) -> MemoryBreakdown:
        """This breakdown with ``terms`` replaced and the total following them."""
        total = self.total + sum(v - getattr(self, k) for k, v in terms.items())
        return replace(self, **terms, total=total)


# While autograd differentiates a layer, the gradient of its output and the gradient of its
# input are both alive (the first is freed after the layer's backward): two activation-sized
# buffers of one micro-batch on top of the saved activations (reverse-mode autodiff; measured
# with hetplan.run.meters.memcount on gpt-tiny and resnet-tiny stages, docs/benchmarks.md).
# By then the activations the later layers saved are freed: the backward peaks where these
# buffers are largest against what is still saved (:func:`backward_workspace`).
BACKWARD_GRAD_BUFFERS = 2  # activation-sized buffers
# A parameter server's flat buffers (run/execute/ps.py): at the push every rank of a
# synchronous PS (workers and server-only ranks) concatenates every shard's gradients into one
# flat buffer per host for its ``reduce`` (a rank without a shard's tensors, a server-only
# one, contributes zeros of its size), and at the pull one flat buffer per host for the
# ``broadcast`` of its weights: the whole model's gradients (fp32 under autocast) once, held
# after the backward has freed the activations. An asynchronous worker's push concatenates
# its gradients per host the same way (run/execute/ps_async.py).
# Under autocast the loss's backward differentiates its fp32 log-softmax: ``nll_loss``'s
# backward makes an fp32 gradient of the logits' size (zero but at the targets) and
# log-softmax's backward another from it, both alive at once, before the cast back (the
# backward of autocast's ``_to_copy``) hands the head its gradient in the low precision.
# ``BACKWARD_GRAD_BUFFERS`` counts two output-sized gradients in the graph dtype (2 x 2 B per
# logit in bf16); these two are 2 x 4 B: ``LOSS_GRAD_BYTES - 2 x 2`` = 4 B per logit more
# (1024 x 50257 x 4 B = 206 MB per GPT-2 sample), at the loss's layer, for the micro-batch
# being differentiated (:func:`loss_grad_bytes`). Counted with
# :class:`hetplan.run.meters.memcount.TensorBytesCounter` on CPU (torch 2.13, autocast bf16,
# ``F.cross_entropy`` of a 256 x 5000 bf16 ``nn.Linear`` output): ``_to_copy`` to fp32, 4 B
# per logit (freed after the forward), ``_log_softmax`` 4 B (saved), ``nll_loss_backward``
# 4 B, ``_log_softmax_backward_data`` 4 B, ``_to_copy`` back 2 B; at
# ``_log_softmax_backward_data`` the saved fp32 output and both fp32 gradients are alive,
# 12 B per logit (and the bf16 logits where the caller still holds them; the runtime drops
# them after the loss's forward, run/execute/executor.py ``_forward``). On the H100
# (gpu-truth, GPT-2 bf16 batch 16) the prediction without it was 11.8% under the measured
# peak, with it 9.9% over (docs/benchmarks.md, 2026-11-28).
LOSS_GRAD_BYTES = 2 * FP32_BYTES  # bytes per logit of the loss backward's fp32 gradients
PS_FLAT_COPIES = 1  # copies of the model's gradient bytes per PS rank at its push and pull
# An asynchronous host's server (run/execute/ps_async.py ``AsyncServer``) runs as threads
# beside its rank's worker and holds, beyond its master copies, flat copies of its shard (the
# gradients or weights as communicated, fp32 under autocast): the receiver's buffer, posted for
# the next push as soon as the last one arrived; a push being applied or queued (the local
# worker's, delivered in process, or a remote one); and the reply to the pulls it answers (one
# copy for all the pulls a push unblocks). The server's units run while the worker steps, so
# these add to the worker's peak. Measured with the counter following the server's threads
# (run/setup/side_threads.py): vgg11 async PS x2 on local-cpu, the host of a 36.9 MB shard
# held 5 shard-sized buffers at its peak (masters, their gradients, these three), 295.4 MB
# against 110.8 MB for the worker beside it (docs/benchmarks.md, 2026-11-28).
ASYNC_SERVER_FLAT_COPIES = 3  # shard-sized flat buffers an asynchronous server holds at once


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


def tp_grad_tensor_bytes(
    layers: Sequence[LayerInfo], dtype: str, tp: int = 1
) -> list[tuple[int, ...]]:
    """Per layer, the gradient tensor sizes one TP rank of degree ``tp`` communicates (DDP
    buckets, PS push and pull: :func:`grad_tensor_bytes`): its shard of a split layer's
    tensors, a replicated layer's whole; at least 1 byte each."""
    sizes = grad_tensor_bytes(layers, dtype)
    return [
        tuple(max(int(b * tp_share(layer, tp)), 1) for b in tensors)
        for layer, tensors in zip(layers, sizes, strict=True)
    ]


def is_gpu(device_type: DeviceType) -> bool:
    """CPU "devices" (catalog name ``cpu...``) get the small framework allowance."""
    return not device_type.name.lower().startswith("cpu")


def framework_overhead_bytes(is_gpu: bool) -> float:
    """The default framework allowance for a GPU or CPU process."""
    return FRAMEWORK_OVERHEAD_BYTES if is_gpu else CPU_FRAMEWORK_OVERHEAD_BYTES


@dataclass(frozen=True, kw_only=True)
class LayerBytes:
    """Per layer (arrays over the layers), the bytes one TP rank of degree ``tp`` holds, each
    already times the layer's TP share (:func:`hetplan.cost.tp.tp_share`)."""

    weights: Floats
    """``param_bytes * weight_scale(dtype)``: fp32 master weights under mixed precision."""
    grads: Floats
    """``param_bytes * grad_scale(dtype)``: fp32 gradients under mixed precision."""
    optimizer: Floats
    """``params * OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES``: fp32 state slots."""
    cast_cache: Floats
    """One autocast low-precision copy of the weights (:func:`cast_cache_bytes`)."""
    saved: Floats
    """Activations kept for backward per sample, in the graph dtype."""
    loss: Floats
    """The loss's fp32 log-softmax beyond ``saved``, per sample (:func:`autocast_loss_bytes`)."""

    def parts(
        self,
        *,
        micro_batch: int,
        kept: int,
        copies: int,
        stashed_versions: int,
        losses: int | None = None,
    ) -> dict[str, Floats]:
        """Per layer, by kind, what a stage holds with the activations of ``kept``
        micro-batches of ``micro_batch`` samples, ``copies`` autocast weight copies,
        ``stashed_versions`` extra weight versions (PipeDream) and the losses of ``losses``
        micro-batches (default ``kept``)."""
        return {
            "weights": self.weights,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "cast_cache": self.cast_cache * copies,
            "activations": self.saved * (micro_batch * kept),
            "stashed_weights": self.weights * stashed_versions,
            "autocast_loss": self.loss * (micro_batch * (kept if losses is None else losses)),
        }


def layer_bytes(
    layers: Sequence[LayerInfo], *, optimizer: str, dtype: str = "fp32", tp: int = 1
) -> LayerBytes:
    """The per-layer memory of ``layers`` on one TP rank of degree ``tp`` (see
    :class:`LayerBytes`); ValueError for an unknown optimizer or ``tp < 1``."""
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"unknown optimizer {optimizer!r}; expected one of {tuple(OPTIMIZER_SLOTS)}"
        )
    if tp < 1:
        raise ValueError(f"tp ({tp}) must be >= 1")
    share = _column([tp_share(x, tp) for x in layers])
    param_bytes = _column([x.param_bytes for x in layers]) * share
    per_param = OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
    return LayerBytes(
        weights=param_bytes * weight_scale(dtype),
        grads=param_bytes * grad_scale(dtype),
        optimizer=_column([x.params for x in layers]) * share * per_param,
        cast_cache=_column([cast_cache_bytes(x, dtype) for x in layers]) * share,
        saved=_column([x.saved_bytes for x in layers]) * share,
        loss=_column([autocast_loss_bytes([x], dtype, tp) for x in layers]),
    )


def _column(values: Sequence[float]) -> Floats:
    return np.asarray(values, dtype=np.float64).reshape(len(values))


def loss_grad_bytes(layer: LayerInfo, dtype: str, tp: int = 1) -> float:
    """Per sample, what the loss's backward holds at ``layer`` beyond the workspace's
    ``BACKWARD_GRAD_BUFFERS`` output-sized gradients in the graph dtype: under mixed precision,
    for a layer with ``loss_logits`` (the model's last), ``LOSS_GRAD_BYTES -
    BACKWARD_GRAD_BUFFERS x DTYPE_BYTES[dtype]`` per logit (a split head's share per TP rank);
    0 in fp32, where the two buffers are the loss's fp32 gradients already."""
    if not is_mixed_precision(dtype) or layer.loss_logits <= 0:
        return 0.0
    extra = max(LOSS_GRAD_BYTES - BACKWARD_GRAD_BUFFERS * DTYPE_BYTES[dtype], 0)
    return float(layer.loss_logits * tp_output_share(layer, tp) * extra)


def layer_workspace(
    layers: Sequence[LayerInfo], micro_batch: int, tp: int = 1, dtype: str = "fp32"
) -> Floats:
    """Per layer ``l``, the gradients alive while ``l`` is differentiated for one micro-batch
    of ``micro_batch`` samples: ``BACKWARD_GRAD_BUFFERS`` of its output's size (per TP rank: a
    split vocabulary head's logits are ``1/tp``, :func:`hetplan.cost.tp.tp_output_share`) and
    at the loss's layer under mixed precision the loss's fp32 gradients
    (:func:`loss_grad_bytes`)."""
    per = [
        BACKWARD_GRAD_BUFFERS * x.out_bytes * tp_output_share(x, tp) + loss_grad_bytes(x, dtype, tp)
        for x in layers
    ]
    return _column(per) * micro_batch


def backward_workspace(
    layers: Sequence[LayerInfo], micro_batch: int, tp: int = 1, dtype: str = "fp32"
) -> float:
    """What the backward of one micro-batch of ``micro_batch`` samples adds to the saved
    activations of ``layers`` at its peak. Differentiating layer ``l`` holds its
    :func:`layer_workspace` while the layers after ``l`` have freed what they saved: the pass
    peaks at ``max_l(saved through l + workspace_l)``, and the workspace is that peak less
    everything saved (>= 0). A VGG's first convolutions have the largest outputs but run their
    backward last, when almost nothing is saved."""
    saved = 0.0
    peak = 0.0
    for x, work in zip(layers, layer_workspace(layers, 1, tp, dtype), strict=True):
        saved += x.saved_bytes * tp_share(x, tp)
        peak = max(peak, saved + float(work))
    return max(peak - saved, 0.0) * micro_batch


def workspace_bound(
    layers: Sequence[LayerInfo], micro_batch: int, tp: int = 1, dtype: str = "fp32"
) -> float:
    """An upper bound of :func:`backward_workspace` for any stage cut from ``layers``: their
    largest :func:`layer_workspace` (the screening's, before it knows the stages)."""
    return float(layer_workspace(layers, micro_batch, tp, dtype).max(initial=0.0))


def autocast_loss_bytes(layers: Sequence[LayerInfo], dtype: str, tp: int = 1) -> float:
    """Per sample, the fp32 log-softmax bytes the loss keeps under autocast beyond the traced
    graph's count (``LOSS_SOFTMAX_BYTES - DTYPE_BYTES[dtype]`` per logit of a layer with
    ``loss_logits``, a split head's share per TP rank); 0 in fp32, where the trace counted it."""
    if not is_mixed_precision(dtype):
        return 0.0
    extra = LOSS_SOFTMAX_BYTES - DTYPE_BYTES[dtype]
    return float(sum(x.loss_logits * tp_output_share(x, tp) * extra for x in layers))


def ps_shard_scale(
    dtype: str, optimizer: str, *, worker: bool = False, asynchronous: bool = False
) -> float:
    """Bytes a parameter-server host keeps per byte of the graph's parameter bytes it serves,
    beyond what a worker on the same rank holds (``worker``):

    - synchronous, on a worker (run/execute/ps.py): the shard's tensors are the worker's own
      parameters and gradients; the host adds the optimizer state alone (``OPTIMIZER_SLOTS``
      fp32 slots per parameter, i.e. per ``MASTER_WEIGHT_BYTES`` of weights);
    - synchronous, server-only: the shard's fp32 weights (``weight_scale``), their gradients
      (``grad_scale``) and the optimizer state;
    - asynchronous (run/execute/ps_async.py): the server's master copies (fp32 weights, a
      gradient per applied push, the optimizer state) and ``ASYNC_SERVER_FLAT_COPIES`` flat
      buffers of the shard (``grad_scale``) on any host; a server-only rank also keeps the
      shard it built its module from (one more ``weight_scale``)."""
    state = weight_scale(dtype) * OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
    state /= MASTER_WEIGHT_BYTES
    if worker and not asynchronous:
        return state
    masters = weight_scale(dtype) + grad_scale(dtype) + state
    if not asynchronous:
        return masters
    flats = ASYNC_SERVER_FLAT_COPIES * grad_scale(dtype)
    return masters + flats + (0.0 if worker else weight_scale(dtype))


def ps_flat_bytes(layers: Sequence[LayerInfo], dtype: str) -> float:
    """The flat buffers a rank of a parameter server holds at its push and pull:
    ``PS_FLAT_COPIES`` times the model's gradient bytes as communicated
    (:func:`grad_tensor_bytes`, fp32 under autocast)."""
    return float(PS_FLAT_COPIES * sum(sum(t) for t in grad_tensor_bytes(layers, dtype)))


def model_input_saved(first: LayerInfo, input_bytes: float) -> float:
    """Per sample, the model input the model's first layer saves for its backward: its
    ``input_bytes`` (at most its ``saved_bytes``) when it has parameters (autograd keeps a
    convolution's and a linear's input and an embedding's indices for the weight gradients),
    else 0. The trace counts it in ``saved_bytes`` but not in ``saved_input_bytes`` (no layer
    made it)."""
    return float(min(input_bytes, first.saved_bytes)) if first.params > 0 else 0.0


def stage_input_kept(
    saved_in: float,
    stage_in: float,
    *,
    micro_batch: int,
    in_flight: int,
    recompute: bool,
    held: RecomputeHeld | None = None,
) -> float:
    """Bytes of a stage's input that its activations count (as :func:`stage_memory` counts
    them), with ``saved_in`` bytes per sample of it saved by its first layer and
    ``stage_in`` bytes per sample in all: ``saved_in`` per in-flight micro-batch, or with
    ``recompute`` ``stage_in`` per micro-batch held as its input plus ``saved_in`` per one
    held whole (``held``; default every micro-batch checkpointed: all in flight as inputs,
    the recomputed one whole)."""
    if not recompute:
        return saved_in * micro_batch * in_flight
    h = held if held is not None else all_recomputed(in_flight)
    return (stage_in * h.inputs + saved_in * h.whole) * micro_batch


def all_recomputed(in_flight: int) -> RecomputeHeld:
    """A stage's peak when every micro-batch is checkpointed: ``in_flight`` held as their
    inputs, one (the one recomputed in its backward) whole."""
    return RecomputeHeld(inputs=in_flight, whole=min(in_flight, 1), unchecked=0)


def batches_held(*, continuous: bool, in_flight: int, micro_batches: int) -> int:
    """Iterations whose input batches a stage that reads data holds at once: one for a
    flushed step; a continuous schedule (PipeDream) starts the next iteration's forwards
    ``in_flight - 1`` micro-batches before the last backward of the current one, and its
    window executor keeps each iteration's batch until the step that ends it
    (run/execute/window.py): ``1 + ceil((in_flight - 1) / micro_batches)``."""
    if not continuous:
        return 1
    return 1 + -(-max(in_flight - 1, 0) // micro_batches)


def input_batch_bytes(sample_bytes: float, samples: int, kept: float = 0.0) -> float:
    """The input batches a stage that reads data holds beyond what its activations count:
    ``samples`` samples of ``sample_bytes`` (the runtime reads its pipeline's whole batch per
    iteration, on the first and the last stage: run/loop/worker.py ``_read``) less ``kept``,
    the part the activations count (on the first stage its micro-batches' inputs,
    :func:`stage_input_kept`; 0 on a last stage, whose activations hold its cut). The targets
    are not charged: an int64 label per sample, or an LM's tokens, small beside the inputs'
    activations."""
    return max(sample_bytes * samples - kept, 0.0)


def stage_memory(
    layers: Sequence[LayerInfo],
    *,
    micro_batch: int,
    in_flight: int,
    optimizer: str,
    dtype: str = "fp32",
    recompute: bool = False,
    held: RecomputeHeld | None = None,
    stashed_versions: int = 0,
    tp: int = 1,
    bucket_bytes: float = 0,
    framework_bytes: float = FRAMEWORK_OVERHEAD_BYTES,
    input_bytes: float | None = None,
    received_bytes: float = 0.0,
    tied_params: float = 0.0,
    optimizer_state: bool = True,
    ps_buffers: float = 0.0,
    batch_bytes: float = 0.0,
    accumulates: bool = False,
) -> MemoryBreakdown:
    """Peak memory of a stage holding ``layers``: the per-layer model (:func:`layer_bytes`)
    summed over the stage, plus the stage-level terms.

    - weights, grads, optimizer: summed per layer (:class:`LayerBytes`),
    - cast_cache (mixed precision): one autocast weight copy per in-flight micro-batch (one
      with ``recompute``),
    - activations kept for backward = saved * micro_batch * in_flight; with ``recompute`` (the
      runtime checkpoints the whole stage per micro-batch: ``torch.utils.checkpoint``,
      non-reentrant, saves only its inputs) the stage input (``input_bytes`` per sample: the
      model input or the cut the stage receives; default the part of the first layer's saved
      bytes that is its input) per in-flight micro-batch plus one micro-batch's full saved
      bytes (the one being recomputed in its backward); in the graph dtype (low precision
      under autocast, see docs/cost-models.md). Not the first layer's whole saved bytes: a
      ResNet stem saves ~8 MB per sample against a 0.6 MB input, and the verdict would hang
      on how finely the model is cut into layers (issue 26). ``held`` says how many
      micro-batches are held as inputs and how many whole at the peak (default every one
      checkpointed, :func:`all_recomputed`; ``except_last`` keeps each iteration's last one
      whole, ``RecomputeHeld.unchecked``, with its received input as in ``stage_inputs``),
    - stashed_weights = stashed_versions * weights (PipeDream weight stashing, fp32 masters),
    - comm_buffers = ``bucket_bytes`` (DDP's flat gradient bucket copies),
    - framework = ``framework_bytes``,
    - stage_inputs (stages after the first) = max(``received_bytes`` - the first layer's
      ``saved_input_bytes``, 0) * micro_batch * in_flight: the values received across the cut
      (``received_bytes`` per sample, the graph's cut bytes) are held until each micro-batch's
      backward sends their gradients back; the part the stage's first layer saves anyway is
      already in the activations. With ``recompute`` only for the micro-batches not
      checkpointed (the others' stage inputs are counted in the activations),
    - backward_workspace: :func:`backward_workspace` over the stage's layers (with the loss's
      fp32 gradients at the model's last layer under mixed precision), and when the
      stage ``accumulates`` gradients over micro-batches its largest layer's gradients once
      more (:func:`accumulation_grad_bytes`),
    - autocast_loss (mixed precision, the stage with the model's last layer):
      :func:`autocast_loss_bytes` per sample of each in-flight micro-batch (the loss is
      computed outside the recomputed stage: kept for every one),
    - ``tied_params``: the stage's copies of weights another stage owns (``cost.ties``), with
      their gradients and optimizer state, added to weights, grads and optimizer,
    - optimizer = 0 when not ``optimizer_state`` (a parameter server's worker: the hosts keep
      the state, :func:`ps_shard_scale`),
    - comm_buffers += max(``ps_buffers`` - the backward's transient terms, 0): a parameter
      server's flat buffers (:func:`ps_flat_bytes`) live at the push and pull, after the
      activations, their gradients, autocast's copies and kept inputs are freed,
    - input_batch = ``batch_bytes`` (:func:`input_batch_bytes`).

    Each layer's TP share (``1 / tp`` for a layer tensor parallelism splits, 1 for a
    replicated one, which every TP rank holds whole) is in :func:`layer_bytes`. The values
    crossing a cut, and a split block's output, are whole on every rank (all-reduced); a split
    vocabulary head's logits stay sharded (the output share).
    """
    if micro_batch < 0 or in_flight < 0:
        raise ValueError(f"micro_batch ({micro_batch}) and in_flight ({in_flight}) must be >= 0")
    per = layer_bytes(layers, optimizer=optimizer, dtype=dtype, tp=tp)
    h = (held if held is not None else all_recomputed(in_flight)) if recompute else None
    kept = h.whole if h is not None else in_flight  # micro-batches held whole
    copies = h.whole if h is not None else in_flight
    sums = per.parts(
        micro_batch=micro_batch,
        kept=kept,
        copies=copies,
        stashed_versions=stashed_versions,
        losses=in_flight,
    )
    parts = {k: float(v.sum()) for k, v in sums.items()}
    if tied_params:
        elem = DTYPE_BYTES[dtype]
        parts["weights"] += tied_params * elem * weight_scale(dtype)
        parts["grads"] += tied_params * elem * grad_scale(dtype)
        parts["optimizer"] += tied_params * OPTIMIZER_SLOTS[optimizer] * OPTIMIZER_STATE_BYTES
    if not optimizer_state:
        parts["optimizer"] = 0.0
    kept_in = 0.0
    if layers:
        extra = max(received_bytes - layers[0].saved_input_bytes, 0.0)
        kept_in = extra * micro_batch * (h.unchecked if h is not None else in_flight)
    if h is not None and layers:
        stage_in = layers[0].saved_input_bytes if input_bytes is None else input_bytes
        parts["activations"] += stage_in * micro_batch * h.inputs
    parts |= {
        "framework": float(framework_bytes),
        "stage_inputs": float(kept_in),
        "backward_workspace": backward_workspace(layers, micro_batch, tp, dtype)
        + (accumulation_grad_bytes(per) if accumulates else 0.0),
        "input_batch": float(batch_bytes),
    }
    transient = sum(parts[k] for k in _FREED_AFTER_BACKWARD)
    parts["comm_buffers"] = float(bucket_bytes) + max(ps_buffers - transient, 0.0)
    return MemoryBreakdown(**parts, total=sum(parts.values()))


def accumulation_grad_bytes(per: LayerBytes) -> float:
    """The gradient a stage holds twice while it accumulates micro-batches: the largest
    layer's. Autograd computes a layer's new parameter gradients beside the ``.grad`` they
    are then added into in place (``AccumulateGrad``,
    ``torch/csrc/autograd/functions/accumulate_grad.h``: the first micro-batch's gradient
    becomes ``.grad``, every later one is added to it), one layer at a time. Measured with
    :class:`hetplan.run.meters.memcount.TensorBytesCounter` on two 512x512 3x3 convolutions
    (batch 2 of 2x2 inputs, fp32): peak 37.81 MB for one micro-batch, 47.29 MB for two or
    four, +9.48 MB = one convolution's weight and bias gradients (docs/benchmarks.md)."""
    return float(per.grads.max()) if per.grads.size else 0.0


# What a stage holds only between a micro-batch's forward and the end of its backward: freed
# before a parameter server's push and pull (:func:`stage_memory`'s ``ps_buffers``).
_FREED_AFTER_BACKWARD = (
    "activations",
    "cast_cache",
    "stage_inputs",
    "backward_workspace",
    "autocast_loss",
)


def with_inputs_ahead(
    mem: MemoryBreakdown, received_bytes: float, *, micro_batch: int, ahead: int
) -> MemoryBreakdown:
    """``mem`` (:func:`stage_memory` of a stage after the first) with the receive buffers of
    ``ahead`` micro-batches whose forward has not run yet added to ``stage_inputs``:
    ``received_bytes`` per sample each, whole (nothing of them is saved yet). The runtime
    posts a receive when the previous stage sends, so under 1F1B the next micro-batch's input
    is in during this stage's backward (:func:`hetplan.planspec.order.received_ahead`)."""
    extra = float(received_bytes * micro_batch * ahead)
    if extra <= 0.0:
        return mem
    return mem.with_terms(stage_inputs=mem.stage_inputs + extra)


def optimizer_step_s(
    compute: ComputeModel,
    graph: ModelGraph,
    device: Device,
    layers: Sequence[LayerInfo],
    optimizer: str,
    tp: int = 1,
) -> float:
    """One optimizer step over ``layers`` on ``device``, one TP rank of degree ``tp`` (its
    TP share of the parameters): the compute model's measured step when it has one (scaled
    by :data:`OPTIMIZER_BYTES_PER_PARAM` when the profile timed another optimizer), else the
    roofline's memory term over those bytes (an elementwise update: a few FLOPs per
    parameter, far below the bytes' time; foreach kernels: a handful of launches); on a CPU
    TP rank, plus the dispatch of its DTensor parameters (``cost.dtensor.tp_step_host_s``)."""
    share = [tp_share(x, tp) for x in layers]
    total = sum(x.params for x in layers)
    params = sum(x.params * f for x, f in zip(layers, share, strict=True))
    names = [x.name for x in layers]
    measured = _measured_optimizer_s(compute, graph, device, names, optimizer)
    host = tp_step_host_s(layers, tp, device)  # DTensor parameters on a CPU rank
    if measured is not None:
        return measured * (params / total if total else 1.0) + host  # this rank's part
    t = device.type
    step = roofline_time(
        0.0,
        params * OPTIMIZER_BYTES_PER_PARAM[optimizer],
        0.0,
        peak_flops=t.flops("fp32"),
        memory_bandwidth=t.memory_bandwidth,
        compute_efficiency=t.compute_efficiency,
        memory_efficiency=t.memory_efficiency,
        kernel_overhead_s=t.kernel_overhead_s,
    )
    return step / device.speed + host


def _measured_optimizer_s(
    compute: ComputeModel, graph: ModelGraph, dev: Device, names: list[str], optimizer: str
) -> float | None:
    """The profile's measured optimizer step for these layers (``MeasuredCompute``), scaled
    by the bytes-per-parameter ratio when the profile timed another optimizer; None when the
    compute model has no measurement for the device."""
    measure = getattr(compute, "optimizer_s", None)
    which = getattr(compute, "profiled_optimizer", None)
    if measure is None or which is None:
        return None
    timed = which(graph, dev)
    if timed not in OPTIMIZER_BYTES_PER_PARAM or optimizer not in OPTIMIZER_BYTES_PER_PARAM:
        return None  # no profile, or one taken without an optimizer step
    t = measure(graph, dev, names)
    if t is None:
        return None
    return float(t) * OPTIMIZER_BYTES_PER_PARAM[optimizer] / OPTIMIZER_BYTES_PER_PARAM[timed]
