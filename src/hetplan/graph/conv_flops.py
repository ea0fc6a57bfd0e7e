"""FLOPs of a convolution, forward and backward, from shapes and the convolution's arguments.

torch's ``FlopCounterMode`` (checked on torch 2.13) counts the forward right (``Cin / groups``
products per output element: the weight's shape carries it) and the input gradient right, but
counts the weight gradient as the dense convolution ``conv(input^T, grad_output^T)`` over all
``Cin`` input channels: ``groups`` times too much (32x for a 32-channel depthwise conv, whose
backward then comes out ~33x its forward instead of ~2x). These formulas count what the
convolution computes:

* forward: every output element sums ``Cin/groups x prod(kernel)`` products, so
  ``MACs = N x prod(out spatial) x prod(weight shape)`` (weight ``Cout x Cin/groups x k..``).
  A transposed convolution is the input-gradient of a direct one: each *input* element is
  scattered to ``Cout/groups x prod(kernel)`` outputs (weight ``Cin x Cout/groups x k..``),
  ``MACs = N x prod(in spatial) x prod(weight shape)``. Products with padding zeros count
  (the kernels compute them); the bias add does not (torch's convention, as for ``addmm``).
* backward: the input gradient is the transposed convolution of ``grad_output`` by the same
  weight and the weight gradient correlates ``input`` with ``grad_output`` per group: each is
  exactly the forward's products. The bias gradient sums ``grad_output`` over batch and space:
  one add per element of ``grad_output``. ``output_mask`` says which of the three are computed
  (no input gradient for a first layer fed with data, no bias gradient without a bias).

Pure functions of integers: the tracer reads shapes from meta tensors (:mod:`hetplan.graph.ops`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

FLOPS_PER_MAC = 2
"""FLOPs per multiply-add (multiply + add; torch's ``FlopCounterMode`` convention)."""


@dataclass(frozen=True)
class ConvArgs:
    """The geometry arguments of ``aten.convolution`` (one entry per spatial dimension)."""

    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool = False
    output_padding: tuple[int, ...] = ()
    """Extra size on one side of a transposed convolution's output (empty: zeros)."""


def output_size(size: int, kernel: int, dim: int, args: ConvArgs) -> int:
    """Output length along spatial dimension ``dim`` (torch's ``Conv*d`` shape formulas)."""
    span = args.dilation[dim] * (kernel - 1)  # extent of the dilated kernel, minus one
    if args.transposed:
        extra = args.output_padding[dim] if args.output_padding else 0
        return (size - 1) * args.stride[dim] - 2 * args.padding[dim] + span + extra + 1
    return (size + 2 * args.padding[dim] - span - 1) // args.stride[dim] + 1


def conv_macs(input_shape: Sequence[int], weight_shape: Sequence[int], args: ConvArgs) -> int:
    """Multiply-adds of one convolution (``input_shape``: ``N x C x spatial..``)."""
    batch, spatial = input_shape[0], input_shape[2:]
    if not args.transposed:
        kernel = weight_shape[2:]
        spatial = [
            output_size(n, k, d, args) for d, (n, k) in enumerate(zip(spatial, kernel, strict=True))
        ]
    return batch * math.prod(spatial) * math.prod(weight_shape)


def conv_forward_flops(
    input_shape: Sequence[int], weight_shape: Sequence[int], args: ConvArgs
) -> int:
    """FLOPs of ``aten.convolution`` (a multiply-add counts 2; the bias add is not counted)."""
    return FLOPS_PER_MAC * conv_macs(input_shape, weight_shape, args)


def conv_backward_flops(
    grad_output_shape: Sequence[int],
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    args: ConvArgs,
    output_mask: Sequence[bool] = (True, True, True),
) -> int:
    """FLOPs of ``aten.convolution_backward``: the forward's for each of the input and weight
    gradients ``output_mask`` asks for, plus one add per ``grad_output`` element for the bias's.
    """
    forward = conv_forward_flops(input_shape, weight_shape, args)
    grad_input, grad_weight, grad_bias = (bool(m) for m in output_mask)
    bias_adds = math.prod(grad_output_shape) if grad_bias else 0
    return forward * (int(grad_input) + int(grad_weight)) + bias_adds
