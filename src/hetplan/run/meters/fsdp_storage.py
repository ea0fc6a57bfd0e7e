"""FSDP2's own storage resizes, followed by the tensor-bytes counter.

FSDP2 keeps every parameter's gathered buffers (``FSDPParam.all_gather_outputs``) as
tensors whose storage it frees with ``storage.resize_(0)`` after a group is resharded and
allocates again with ``storage.resize_(n)`` before the next all-gather
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``: ``alloc_storage``,
``free_storage``; torch 2.4-2.13). A storage resize is not an ATen operator, so
:class:`hetplan.run.meters.memcount.TensorBytesCounter` cannot see it: a sharded step counted
the buffers made on the first step (``torch.empty``) as held to its end, every group's at
once, and later steps never counted them (vgg11, 2 ranks, ZeRO-3: step 0 100.4 MB, step 1
82.5 MB of live tensors on each rank, measured with this module absent).

:func:`follow_fsdp_resizes` wraps those two functions while a counter is active: a free
drops the storage from the count, an allocation counts it as new. Where torch has no such
functions (an FSDP2 that manages its buffers otherwise), nothing is wrapped and the counter
works as before.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Protocol

import torch

Resize = Callable[[torch.Tensor], None]


class _Follower(Protocol):
    """What the counter offers to follow a resize (see ``TensorBytesCounter``)."""

    def storage_allocated(self, tensor: torch.Tensor) -> None: ...

    def storage_freeing(self, tensor: torch.Tensor) -> None: ...


# Where FSDP2 keeps those functions: torch >= 2.6, then the composable path of 2.4-2.5.
_FSDP_PARAM_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_param",
    "torch.distributed._composable.fsdp._fsdp_param",
)


def _fsdp_param_module() -> ModuleType | None:
    """FSDP2's parameter module if it has both functions (imported on first use: only a
    counted step needs it)."""
    for name in _FSDP_PARAM_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "alloc_storage", None)) and callable(
            getattr(module, "free_storage", None)
        ):
            return module
    return None


@contextlib.contextmanager
def follow_fsdp_resizes(counter: _Follower) -> Iterator[None]:
    """While active, FSDP2's ``alloc_storage`` and ``free_storage`` tell ``counter``."""
    module = _fsdp_param_module()
    if module is None:
        yield
        return
    alloc: Resize = getattr(module, "alloc_storage")  # noqa: B009 - as above
    free: Resize = getattr(module, "free_storage")  # noqa: B009

    def alloc_followed(tensor: torch.Tensor) -> None:
        empty = tensor.untyped_storage().size() == 0
        alloc(tensor)
        if empty:
            counter.storage_allocated(tensor)

    def free_followed(tensor: torch.Tensor) -> None:
        counter.storage_freeing(tensor)
        free(tensor)

    _install(module, alloc_followed, free_followed)
    try:
        yield
    finally:
        _install(module, alloc, free)


def _install(module: ModuleType, alloc: Resize, free: Resize) -> None:
    """Put ``alloc`` and ``free`` where FSDP2's methods look them up (module globals)."""
    setattr(module, "alloc_storage", alloc)  # noqa: B010 - mypy does not know the module
    setattr(module, "free_storage", free)  # noqa: B010
