"""The model graph: an ordered list of partitionable layers with their costs.

Per-sample quantities (FLOPs, activation bytes, cut bytes) scale linearly with the batch;
parameter quantities do not. Keeping them apart lets the planner price any micro-batch size
from one trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetplan.errors import InputError

OP_CLASSES = ("matmul", "conv", "conv_grouped", "attention", "memory")
"""Operation classes a layer's kernels are priced by (:mod:`hetplan.cost.calibration`):
``matmul`` (mm, bmm, addmm, linear...), ``conv`` (dense convolutions, forward and backward),
``conv_grouped`` (``groups > 1``: grouped and depthwise convolutions), ``attention`` (fused
scaled-dot-product attention) and ``memory`` (every other kernel: elementwise, normalisation,
reductions, copies; priced by the bytes it moves)."""

UNTRACED_SHOWN = 6
"""Layers named in a one-line note on blocks torch.fx could not trace (the rest are counted)."""


@dataclass(frozen=True, kw_only=True)
class OpWork:
    """What the kernels of one operation class do in one pass of a layer, per sample."""

    op_class: str
    """One of :data:`OP_CLASSES`."""
    backward: bool
    """Backward pass (False: forward)."""
    flops: float
    """FLOPs per sample (0 for ``memory``)."""
    io_bytes: float
    """Bytes per sample the kernels read and write, excluding parameters and their
    gradients (as ``LayerInfo.fwd_io_bytes``)."""
    kernels: int
    """Kernel launches per pass (independent of the batch)."""
    probe_intensity: float = 0.0
    """FLOPs per byte of the calibration probe shaped like these kernels, FLOP-weighted: for
    convolutions, the 3x3 probe whose implicit GEMM matches theirs
    (:func:`hetplan.graph.ops.conv_probe_intensity`); 0: ``flops / io_bytes`` stands."""


@dataclass(frozen=True, kw_only=True)
class LayerInfo:
    """One partitionable layer (a module at the chosen depth, in execution order)."""

    name: str
    """Module FQN, e.g. ``layer1.0``."""
    fwd_flops: float
    """Forward FLOPs per sample (a multiply-add counts 2)."""
    bwd_flops: float
    """Backward FLOPs per sample (input and weight gradients)."""
    params: int
    """Trainable parameters owned by the layer."""
    shared_params: int = 0
    """Trainable parameters the layer uses but an earlier layer owns (a tied weight)."""
    shared_owner: int = -1
    """Index (in ``ModelGraph.layers``) of the earliest layer owning those parameters; -1
    when ``shared_params`` is 0. A pipeline stage that does not hold that layer keeps a copy
    of the tied weight (:mod:`hetplan.cost.ties`)."""
    param_bytes: int
    """Bytes of those parameters in the model dtype."""
    param_tensor_bytes: tuple[int, ...] = ()
    """Byte size of each parameter tensor, in registration order (PS sharding, DDP buckets)."""
    param_tensor_rows: tuple[int, ...] = ()
    """Dim-0 size of each parameter tensor (1 for a scalar), in the same order: FSDP2 shards
    on dim 0 (:mod:`hetplan.cost.sharded`); empty in graphs cached before it was recorded."""
    out_bytes: int
    """Bytes per sample of the layer's output activation."""
    saved_bytes: int
    """Bytes per sample kept by autograd for the backward pass (activations, not weights)."""
    saved_input_bytes: int = 0
    """Part of ``saved_bytes`` in tensors earlier layers produced: for a stage starting at this
    layer, the received input it already counts (see ``stage_memory``)."""
    loss_logits: int = 0
    """Elements per sample of the logits the default loss (cross-entropy) reads, on a
    classifier's or language model's last layer; 0 elsewhere. The trace counts the loss's
    saved log-softmax in ``saved_bytes`` at the traced dtype; under autocast it is fp32
    (``cost.memory.autocast_loss_bytes``)."""
    fwd_io_bytes: int
    """Bytes per sample read and written by the forward kernels, excluding weights."""
    bwd_io_bytes: int
    """Bytes per sample read and written by the backward kernels, excluding weights."""
    fwd_kernels: int = 0
    """Number of forward operators (kernel launches) per pass."""
    bwd_kernels: int = 0
    """Number of backward operators per pass."""
    fwd_conv_flops: float = 0.0
    """Part of ``fwd_flops`` done by convolution operators (priced apart: cuDNN runs fp32
    convolutions on TF32 tensor cores by default, see :mod:`hetplan.cost.compute`)."""
    bwd_conv_flops: float = 0.0
    """Part of ``bwd_flops`` done by convolution operators (``convolution_backward``)."""
    tp_units: int = 0
    """Megatron-style tensor-parallel units inside the layer (attentions with separate q/k/v
    projections and Linear-activation-Linear MLPs, :func:`hetplan.graph.tp_units.find_tp_units`):
    each all-reduces its output forward and its input gradient backward (:mod:`hetplan.cost.tp`)."""
    tp_linears: int = 0
    """``nn.Linear`` modules of the layer's ``tp_units`` (q, k, v and output projections; up,
    gate and down projections) that tensor parallelism splits: each runs through DTensor on
    every TP rank (:mod:`hetplan.cost.dtensor`)."""
    tp_vocab: str = ""
    """The layer holds the embedding over the vocabulary (``embedding``), the output head over
    it (``head``), both (``embedding+head``) or neither (``""``), split by vocabulary rows
    (:func:`hetplan.graph.tp_units.find_vocab_pair`)."""
    tp_split: int = 0
    """What a tensor-parallel degree must divide for the layer to be split: the gcd of its
    attentions' head counts, its MLPs' inner widths and the vocabulary size (0: nothing to
    split, the layer is replicated on every TP rank)."""
    tp_tokens: int = 0
    """Per sample, the positions (tokens) of the tensors TP all-reduces in this layer, read
    from ``out_bytes`` (the output is ``tokens x width``: a block's hidden stream, the
    embedding's output, the head's logits); 0 when ``tp_split`` is 0."""
    tp_hidden: int = 0
    """Width (hidden size) of the tensors TP all-reduces in this layer: the units' output
    width, the embedding's dimension, the head's input width; 0 when ``tp_split`` is 0."""
    tp_error: str = ""
    """Why tensor parallelism cannot split this layer although it may hold units: the module
    torch.fx could not trace and the error, one line (``"block0.attn: TypeError: ..."``; several
    joined by ``"; "``); empty when the search saw the whole layer. Such a layer is priced
    replicated (``tp_units`` 0, only a vocabulary part splits) and a model with one is offered no
    TP plan (:func:`hetplan.plan.tp.has_tp_units`)."""
    work: tuple[OpWork, ...] = ()
    """The layer's kernels by operation class and pass (:class:`OpWork`; at most one entry per
    class and pass). Empty for graphs traced before it existed: then only the totals above
    price the layer."""


@dataclass(frozen=True, kw_only=True)
class ModelGraph:
    """A model as an ordered list of layers plus the bytes crossing every cut."""

    name: str
    """Zoo name or source of the model."""
    input_shape: tuple[int, ...]
    """Shape of one sample (without the batch dimension)."""
    input_bytes: int
    """Bytes per sample of the model input."""
    dtype: str
    """Parameter/activation dtype: fp32, fp16 or bf16."""
    layers: tuple[LayerInfo, ...]
    cut_bytes: tuple[int, ...]
    """``cut_bytes[i]``: bytes per sample of all tensors crossing the cut after layer ``i``
    (between ``layers[i]`` and ``layers[i + 1]``); ``len(layers) - 1`` entries."""
    depth: int = 1
    """Module depth the layers were taken at."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Anything the extractor could not attribute exactly (e.g. glue ops outside layers)."""
    split_error: str | None = None
    """Why the forward cannot be cut into pipeline stages at these layers (None: it can be cut
    between any two layers; see :mod:`hetplan.graph.split`)."""

    def __post_init__(self) -> None:
        if len(self.cut_bytes) != max(len(self.layers) - 1, 0):
            raise ValueError(
                f"cut_bytes has {len(self.cut_bytes)} entries, expected {len(self.layers) - 1}"
            )

    @property
    def total_params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def total_param_bytes(self) -> int:
        return sum(layer.param_bytes for layer in self.layers)

    @property
    def total_fwd_flops(self) -> float:
        """Forward FLOPs per sample."""
        return sum(layer.fwd_flops for layer in self.layers)

    def untraced(self) -> str:
        """The layers holding a block torch.fx could not trace (``LayerInfo.tp_error``), with
        the first one's module and error, for one-line notes:
        ``"layers block0, block1 (block0.attn: TypeError: ...)"``; "" when there are none."""
        bad = [layer for layer in self.layers if layer.tp_error]
        if not bad:
            return ""
        names = ", ".join(layer.name for layer in bad[:UNTRACED_SHOWN])
        if len(bad) > UNTRACED_SHOWN:
            names += f" and {len(bad) - UNTRACED_SHOWN} more"
        return f"layer{'s' if len(bad) > 1 else ''} {names} ({bad[0].tp_error})"

    def index(self, name: str) -> int:
        for i, layer in enumerate(self.layers):
            if layer.name == name:
                return i
        raise InputError(f"layer {name!r} is not a layer of model {self.name!r}")
