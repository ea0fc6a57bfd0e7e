"""Values crossing a stage cut: their shape, and sending them between ranks.

The values crossing a cut (see :mod:`hetplan.graph.split`) are any pytree: tensors, tuples and
dicts of tensors, and Python constants (a shape read by glue code). A :class:`Template`
records the structure once per run, from a real forward of one micro-batch; then each
micro-batch sends only its tensors, one ``isend`` per tensor, tagged so that messages of
different micro-batches and directions never match each other (gloo matches by tag; NCCL by
order, which the schedule keeps the same on both sides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils import _pytree as pytree

TAG_STRIDE = 4096  # tensors per message at most (tags are micro-batch * 2 + direction, strided)


@dataclass(frozen=True)
class Leaf:
    """One leaf of a value crossing a cut: a tensor's shape and dtype, or a constant."""

    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    needs_grad: bool = False
    """The sender's tensor requires a gradient: the receiver sends one back."""
    constant: Any = None


@dataclass(frozen=True)
class Template:
    spec: pytree.TreeSpec
    leaves: tuple[Leaf, ...]

    @property
    def tensors(self) -> list[int]:
        return [i for i, leaf in enumerate(self.leaves) if leaf.shape is not None]

    @property
    def grads(self) -> list[int]:
        """Leaves that carry a gradient back, in order."""
        return [i for i, leaf in enumerate(self.leaves) if leaf.needs_grad]

    @property
    def nbytes(self) -> int:
        total = 0
        for leaf in self.leaves:
            if leaf.shape is not None and leaf.dtype is not None:
                numel = 1
                for d in leaf.shape:
                    numel *= d
                total += numel * leaf.dtype.itemsize
        return total


def template_of(values: tuple[Any, ...]) -> Template:
    flat, spec = pytree.tree_flatten(values)
    leaves = []
    for v in flat:
        if isinstance(v, torch.Tensor):
            grad = bool(v.requires_grad and v.is_floating_point())
            leaves.append(Leaf(tuple(v.shape), v.dtype, grad))
        else:
            leaves.append(Leaf(None, None, constant=v))
    if len(leaves) >= TAG_STRIDE:
        raise ValueError(f"{len(leaves)} values cross one cut; at most {TAG_STRIDE - 1} supported")
    return Template(spec, tuple(leaves))


@dataclass
class _Staging:
    """Stage point-to-point tensors through host memory: gloo moves only CPU tensors, so a GPU
    rank in a job that gloo carries (one that mixes CPU and GPU ranks) sends and receives CPU
    copies. Set once per rank process (each rank is its own process)."""

    via_host: bool = False


_STAGING = _Staging()


def configure(via_host: bool) -> None:
    _STAGING.via_host = via_host


def wire(t: torch.Tensor) -> torch.Tensor:
    """The tensor to hand to ``isend`` (a CPU copy when staging through the host)."""
    return t.detach().to("cpu", copy=True) if _STAGING.via_host else t


def wire_device(device: str) -> str:
    """Where receive buffers live."""
    return "cpu" if _STAGING.via_host else device


def arrived(bufs: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    """Received buffers on the rank's device (after their works completed)."""
    return [b.to(device) for b in bufs] if _STAGING.via_host else bufs


def tag(microbatch: int, backward: bool, leaf: int) -> int:
    return (microbatch * 2 + int(backward)) * TAG_STRIDE + leaf


def send_values(values: tuple[Any, ...], t: Template, dst: int, microbatch: int) -> list[dist.Work]:
    flat = pytree.tree_leaves(values)
    works = []
    for i in t.tensors:
        data = wire(flat[i].detach().contiguous())
        works.append(dist.isend(data, dst, tag=tag(microbatch, False, i)))
    return works


def recv_values(
    t: Template, src: int, microbatch: int, device: str
) -> tuple[list[torch.Tensor], list[dist.Work]]:
    """Post receives of one micro-batch's tensors; :func:`assemble` once the works are done."""
    return _post_recv(t, t.tensors, src, microbatch, False, device)


def _post_recv(
    t: Template, leaves: list[int], src: int, microbatch: int, backward: bool, device: str
) -> tuple[list[torch.Tensor], list[dist.Work]]:
    bufs, works = [], []
    for i in leaves:
        leaf = t.leaves[i]
        assert leaf.shape is not None and leaf.dtype is not None
        buf = torch.empty(leaf.shape, dtype=leaf.dtype, device=wire_device(device))
        bufs.append(buf)
        works.append(dist.irecv(buf, src, tag=tag(microbatch, backward, i)))
    return bufs, works


def assemble(t: Template, tensors: list[torch.Tensor]) -> tuple[Any, ...]:
    """The received value, with gradients enabled where the sender's tensor had one."""
    it = iter(tensors)
    flat: list[Any] = []
    for leaf in t.leaves:
        if leaf.shape is None:
            flat.append(leaf.constant)
            continue
        x = next(it)
        flat.append(x.requires_grad_(True) if leaf.needs_grad else x)
    out: tuple[Any, ...] = pytree.tree_unflatten(flat, t.spec)
    return out


def grad_tensors(values: tuple[Any, ...], t: Template) -> list[torch.Tensor]:
    """The tensors of ``values`` that carry a gradient, in template order."""
    flat = pytree.tree_leaves(values)
    return [flat[i] for i in t.grads]


def send_grads(
    grads: list[torch.Tensor], t: Template, dst: int, microbatch: int
) -> list[dist.Work]:
    return [
        dist.isend(wire(g.contiguous()), dst, tag=tag(microbatch, True, i))
        for g, i in zip(grads, t.grads, strict=True)
    ]


def recv_grads(
    t: Template, src: int, microbatch: int, device: str
) -> tuple[list[torch.Tensor], list[dist.Work]]:
    """Post receives of the gradients of one micro-batch's values sent to ``src``."""
    return _post_recv(t, t.grads, src, microbatch, True, device)
