"""Recording of aten ops on meta tensors and their selective replay (see :mod:`.materialize`).

Tensors are identified by Python object (kept alive, so ``id`` stays unique) and storages by the
meta StorageImpl address; dependencies are tracked per storage so writes through views count.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from hetplan.errors import ModelError

_EMPTY = {
    "empty",
    "empty_like",
    "empty_strided",
    "empty_permuted",
    "new_empty",
    "new_empty_strided",
}
"""Ops that leave memory uninitialised: zero-filled on replay so values are reproducible."""


@dataclass(frozen=True)
class Ref:
    """A recorded meta tensor in an op's arguments."""

    key: int


@dataclass(frozen=True)
class Op:
    func: Any  # an aten OpOverload; None when the op cannot be replayed (``why`` says why)
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outs: tuple[tuple[int, int], ...]  # (position among the result's pytree leaves, tensor key)
    reads: frozenset[int]  # storages of meta inputs
    touches: frozenset[int]  # storages written, created or aliased by the op
    why: str = ""


def _sid(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


class Recording(TorchDispatchMode):  # type: ignore[misc]
    """Records every aten op with a meta input or output, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.tensors: list[torch.Tensor] = []  # key -> tensor, kept alive
        self.storage: list[int] = []  # key -> storage id
        self._keys: dict[int, int] = {}  # id(tensor) -> key
        self._owner: dict[int, int] = {}  # storage id -> key of its first tensor
        self.failed = ""  # the op that raised on meta, for the error message

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        self.failed = str(func)  # still set if the op raises on meta
        result = func(*args, **kwargs)
        self.failed = ""
        ins = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        leaves = pytree.tree_leaves(result)
        metas = [(i, t) for i, t in enumerate(leaves) if isinstance(t, torch.Tensor) and t.is_meta]
        if not metas and not any(t.is_meta for t in ins):
            return result
        targs, tkwargs = pytree.tree_map(lambda x: self._template(x, str(func)), (args, kwargs))
        written = {_sid(t) for t in _written(func, args, kwargs) if t.is_meta}
        outs = tuple((i, self._define(t)) for i, t in metas)
        reads = frozenset(_sid(t) for t in ins if t.is_meta)
        touches = frozenset(written | {self.storage[k] for _, k in outs})
        self.ops.append(Op(func, targs, tkwargs, outs, reads, touches))
        return result

    def _template(self, x: Any, user: str) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        # Real tensors are constants, copied now in case they change later.
        return Ref(self.ref(x, user)) if x.is_meta else x.detach().clone()

    def _known(self, t: torch.Tensor) -> int | None:
        key = self._keys.get(id(t))
        # A storage change means ``.data =`` swapped it: treat as a new tensor.
        return key if key is not None and self.storage[key] == _sid(t) else None

    def _define(self, t: torch.Tensor) -> int:
        known = self._known(t)
        if known is not None:
            return known
        key = len(self.tensors)
        self.tensors.append(t)
        self.storage.append(_sid(t))
        self._keys[id(t)] = key
        self._owner.setdefault(_sid(t), key)
        return key

    def ref(self, t: torch.Tensor, user: str = "the module") -> int:
        """The key of meta tensor ``t``. A tensor no op produced (``nn.Parameter`` and ``.data``
        make aliases below the dispatcher) is recorded as an ``as_strided`` of its storage."""
        known = self._known(t)
        if known is not None:
            return known
        sid = _sid(t)
        owner = self._owner.get(sid)
        key = self._define(t)
        if owner is None or self.tensors[owner].dtype != t.dtype:
            what = "a meta tensor made outside the recording" if owner is None else "a dtype view"
            why = f"{what}, used by {user}"
            op = Op(None, (), {}, ((0, key),), frozenset(), frozenset({sid}), why)
        else:
            func = torch.ops.aten.as_strided.default
            args = (Ref(owner), list(t.shape), list(t.stride()), t.storage_offset())
            op = Op(func, args, {}, ((0, key),), frozenset({sid}), frozenset({sid}))
        self.ops.append(op)
        return key


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            out += [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    if not out and func.overloadpacket.__name__.endswith("_") and args:
        out += [t for t in args[:1] if isinstance(t, torch.Tensor)]
    return out


def cone(rec: Recording, targets: dict[int, str]) -> dict[int, str]:
    """Op index -> the first target FQN that needs it: the ops that touched a target's storage,
    then, transitively, those that touched what they read before they read it."""
    touching: dict[int, list[int]] = {}
    for j, op in enumerate(rec.ops):
        for sid in op.touches:
            touching.setdefault(sid, []).append(j)
    needed: dict[int, str] = {}
    bound: dict[int, int] = {}
    for key, name in targets.items():
        todo = [(rec.storage[key], len(rec.ops))]
        while todo:
            sid, before = todo.pop()
            if bound.get(sid, -1) >= before:
                continue
            bound[sid] = before
            for j in touching.get(sid, []):
                if j >= before:
                    break
                if j not in needed:
                    needed[j] = name
                    todo += [(s, j) for s in rec.ops[j].reads]
    return needed


def replay(
    rec: Recording, targets: dict[int, str], device: torch.device, seed: int
) -> dict[int, torch.Tensor]:
    """Run the ops in the targets' cone on ``device`` in recorded order; key -> tensor."""
    needed = cone(rec, targets)
    env: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for j in sorted(needed):
            op = rec.ops[j]
            if op.func is None:
                raise ModelError(f"{needed[j]}: cannot replay op #{j}: {op.why}")
            try:
                leaves = pytree.tree_leaves(_run(op, j, env, device, seed))
            except Exception as err:
                raise ModelError(
                    f"{needed[j]}: replaying {op.func} (op #{j}) failed: {_first_line(err)}"
                ) from err
            env.update((key, leaves[pos]) for pos, key in op.outs)
    return {key: env[key] for key in targets}


def _run(op: Op, index: int, env: dict[int, torch.Tensor], device: torch.device, seed: int) -> Any:
    def resolve(x: Any) -> Any:
        if isinstance(x, Ref):
            return env[x.key]
        if isinstance(x, torch.Tensor):
            return x.to(device, copy=True)  # the op may write into it
        return device if isinstance(x, torch.device) and x.type == "meta" else x

    args, kwargs = pytree.tree_map(resolve, (op.args, op.kwargs))
    func = op.func
    if torch.Tag.nondeterministic_seeded in func.tags:
        # Each random op draws from its own generator: values depend on (seed, index) only.
        op_seed = (seed * 1_000_003 + index) % 2**64
        func = _with_generator(func)
        if func is None:
            with _default_rng(device, op_seed):
                return op.func(*args, **kwargs)
        gen = torch.Generator(device=device)
        gen.manual_seed(op_seed)
        names = [a.name for a in func._schema.arguments]
        at = names.index("generator")
        if at < len(args):
            args = (*args[:at], gen, *args[at + 1 :])
        else:
            kwargs["generator"] = gen
    result = func(*args, **kwargs)
    if func.overloadpacket.__name__ in _EMPTY:
        for t in pytree.tree_leaves(result):
            if isinstance(t, torch.Tensor):
                t.zero_()
    return result


def _with_generator(func: Any) -> Any:
    """``func`` if it takes a generator, else its overload that adds one (``randn.generator``)."""
    names = [a.name for a in func._schema.arguments]
    if "generator" in names:
        return func
    packet = func.overloadpacket
    for name in packet.overloads():
        other = getattr(packet, name)
        cand = [a.name for a in other._schema.arguments]
        if "generator" in cand and [n for n in cand if n != "generator"] == names:
            return other
    return None


@contextmanager
def _default_rng(device: torch.device, seed: int) -> Iterator[None]:
    """Seed the default generator of ``device`` (ops without a generator argument), restoring
    it afterwards."""
    mod = None if device.type == "cpu" else torch.get_device_module(device.type)
    index = [] if mod is None else [mod.current_device() if device.index is None else device.index]
    with torch.random.fork_rng(devices=index, device_type=device.type):
        torch.default_generator.manual_seed(seed)
        if mod is not None:
            with mod.device(index[0]):
                mod.manual_seed(seed)
        yield
