"""Deferred initialisation: build a model on ``meta``, materialise only one stage's tensors.

``record(factory)`` runs ``factory()`` under ``torch.device("meta")`` while a dispatch mode
records every aten op that reads or writes a meta tensor (creation, views, in-place init such as
``normal_``/``uniform_``/``fill_``, out-of-place buffer math such as ``tril(ones(T, T))``).
``Deferred.materialize(names, device, seed)`` then replays, on ``device``, only the ops in the
dependency cone of the named parameters and buffers (the ops that created or wrote their
storage and, transitively, what those ops read before they ran) and swaps the results into the
module. Every other tensor stays on meta and is never allocated.

Values. Each random op (``normal_``, ``uniform_``, ``randn``, ... anything tagged
``nondeterministic_seeded``) is replayed with its own generator seeded with
``(seed * 1_000_003 + i) % 2**64``, ``i`` being the op's index in the recording; a generator
passed by the model is replaced. So a tensor's values depend only on ``seed``, the recording and
the device type, never on which other tensors are materialised: ``materialize(None, ...)`` (the
whole model) is the reference a stage matches bit for bit on the same device. The values differ
from running ``factory()`` eagerly after ``torch.manual_seed(seed)``. Uninitialised memory
(``torch.empty`` never written) is zero-filled so it too is reproducible.

Limits (a :class:`~hetplan.errors.ModelError` in one line; callers build the whole model
instead): init that reads tensor data (``.item()``, ``.tolist()``, ``bool(t)``, ``torch.equal``)
fails while recording; a tensor no recorded op produced and that aliases no recorded storage, a
view of a storage under another dtype, or an op whose replay raises, fails when materialising
and names the tensor and op. Tensors the factory builds on a real device (an explicit
``device="cpu"``) are not deferred: ``materialize`` moves the selected ones to ``device``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from hetplan.errors import ModelError
from hetplan.run.setup._replay import Recording, replay

__all__ = ["Deferred", "record"]

_LITERALS = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor}
"""Factories that copy Python data in below the dispatcher: on meta the data would be lost."""


def record(factory: Callable[[], nn.Module]) -> Deferred:
    """Build ``factory()`` on meta, recording its init ops; raises ModelError if it cannot."""
    rec = Recording()
    try:
        with torch.device("meta"), _Literals(), rec:
            module = factory()
    except ModelError:
        raise
    except Exception as err:
        where = f" ({rec.failed} raised)" if rec.failed else ""
        lines = str(err).strip().splitlines()
        raise ModelError(
            f"model init cannot be deferred{where}: {type(err).__name__}: "
            f"{lines[0] if lines else ''}"
        ) from err
    if not isinstance(module, nn.Module):
        raise ModelError(f"model factory returned {type(module).__name__}, not an nn.Module")
    return Deferred(module, rec)


class _Literals(TorchFunctionMode):  # type: ignore[misc]
    """Builds ``torch.tensor(data)``-style literals on CPU, then moves them to meta through the
    dispatcher, so the recording holds the data as a constant of a ``_to_copy``."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func in _LITERALS:
            method = func is torch.Tensor.new_tensor
            rest = args[1:] if method else args
            data = rest[0] if rest else kwargs.get("data")
            # Only active inside record(), where the default device is meta.
            device = kwargs.get("device") or (args[0].device if method else "meta")
            if torch.device(device).type == "meta" and not isinstance(data, torch.Tensor):
                return func(*args, **{**kwargs, "device": "cpu"}).to("meta")
        return func(*args, **kwargs)


class Deferred:
    """A module built on meta plus the recording that materialises any of its tensors."""

    def __init__(self, module: nn.Module, rec: Recording) -> None:
        self.module = module
        self._rec = rec
        # Resolve every module tensor to a recorded key now so the recording is final
        # (aliases made below the dispatcher, such as nn.Parameter, get an as_strided op).
        self._keys = {id(t): rec.ref(t) for _, t in _named_tensors(module) if t.is_meta}

    def materialize(
        self,
        names: Collection[str] | None = None,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ) -> nn.Module:
        """Materialise the parameters and buffers named by FQN (None: all) on ``device``.

        A tied tensor (one object under several names) is materialised once when any of its
        names is selected and stays tied: every name then points at the same new tensor.
        Parameters stay ``nn.Parameter`` with their ``requires_grad``. Returns the module."""
        dev = torch.device(device)
        groups: dict[int, list[str]] = {}
        tensors: dict[int, torch.Tensor] = {}
        for fqn, t in _named_tensors(self.module):
            groups.setdefault(id(t), []).append(fqn)
            tensors[id(t)] = t
        if names is not None:
            unknown = set(names).difference(*groups.values())
            if unknown:
                raise ModelError(f"materialize: no parameter or buffer {sorted(unknown)[0]!r}")
        wanted = set(names) if names is not None else None
        chosen = [i for i, fqns in groups.items() if wanted is None or wanted.intersection(fqns)]
        targets = {self._keys[i]: groups[i][0] for i in chosen if tensors[i].is_meta}
        values = replay(self._rec, targets, dev, seed)
        for i in chosen:
            old = tensors[i]
            if not old.is_meta and old.device == dev:
                continue  # already real on ``device``
            new = values[self._keys[i]] if old.is_meta else old.detach().to(dev)
            if isinstance(old, nn.Parameter):
                new = nn.Parameter(new, requires_grad=old.requires_grad)
            for fqn in groups[i]:
                _assign(self.module, fqn, new)
        return self.module


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]


def _assign(module: nn.Module, fqn: str, value: torch.Tensor) -> None:
    prefix, _, name = fqn.rpartition(".")
    parent = module.get_submodule(prefix)
    # Direct dict writes keep buffer persistence and skip setattr's type checks.
    if name in parent._parameters:
        parent._parameters[name] = value
    else:
        parent._buffers[name] = value
