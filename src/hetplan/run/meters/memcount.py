"""Live tensor bytes on CPU: a counter of tensor storages, for the measured peak of a step.

On CUDA the measured peak memory of a step comes from the allocator
(``torch.cuda.max_memory_allocated``, see
:func:`hetplan.run.meters.step_memory.measure_step_memory`). The CPU
allocator keeps no such statistics and the process's peak resident set size includes the
Python runtime, the libraries and every buffer of the process, so it cannot be compared with
a predicted figure. :class:`TensorBytesCounter` counts the bytes of live tensor *storages*
instead, which is what the planner's memory model predicts.

What is counted
    * the *baseline*: the storages of the tensors passed as ``baseline`` when the counter is
      entered (typically the module's parameters, their gradients and the optimizer's state),
      each storage once (keyed by ``untyped_storage().data_ptr()``, so views, tied weights and
      flat buffers are not counted twice); its ``nbytes()`` counts, not the tensor's
      ``numel() * element_size()``;
    * every storage that an ATen operator allocates while the counter is active, with the
      full ``nbytes()`` of the storage, from the moment the operator returns until the storage
      is freed. Operators are seen through a ``TorchDispatchMode``, which sits below autograd
      and autocast in the dispatcher, so this includes the forward's activations and the
      tensors autograd saves for backward, the backward's gradients (on CPU the autograd engine
      runs the backward on the calling thread, inside the mode), the gradients accumulated
      into ``.grad`` (``AccumulateGrad`` keeps the tensor the backward produced), autocast's
      casts, the optimizer's state created lazily on its first ``step()`` (``zeros_like``
      buffers and the ``torch.tensor`` "step" scalars, seen as ``aten.lift_fresh``) and its
      temporaries;
    * a DTensor's local tensors (tensor parallelism): the mode declines DTensor operators, so
      DTensor's own dispatch runs them on the local shards, and those plain operators come
      back to the mode (before this, a tensor-parallel gpt-tiny rank measured 7.1 MB of the
      16.9 MB it holds: the split layers' activations and the sharded optimizer state were
      missed).

Outputs that alias an input's storage (views, in-place and ``out=`` operators) add nothing;
a view of a storage that existed before the counter was entered and is not in the baseline
(e.g. the input batch) is not counted at all. ``peak_bytes`` is the largest value of
baseline + new live bytes right after an operator's outputs are recorded; ``current_bytes``
is updated at each operator (a ``del`` shows at the next operator) and at exit. The counter
holds only weak references to the baseline and to the tensors it sees.

Held from the start
    :meth:`TensorBytesCounter.peak_held_from_start` answers "what would the peak have been had
    these storages, allocated inside the context, been alive from its start": a fresh run's
    first step creates the optimizer's state in its ``step()``, after the backward's peak,
    while every later step (and a resumed run's first) holds it throughout. The counter keeps
    the live total after every operator (8 bytes each) and each storage's operator index.

What is not counted
    * memory that is not a tensor storage: allocator headers, fragmentation and caching,
      Python objects, tensor metadata;
    * temporaries that a kernel allocates internally without going through the dispatcher
      (e.g. oneDNN / BLAS workspaces), gloo's and other communication buffers (the
      ``torch.distributed`` backends copy and allocate below the dispatcher);
    * storages made without an ATen operator (``torch.from_numpy``, tensors loaded from a
      file or received from another process);
    * storages that change in place: ``resize_``, ``set_`` or ``param.data = ...`` on a
      counted storage are not followed;
    * meta tensors and tensors without a strided storage (sparse, nested), and other tensor
      subclasses' operators (run as they are: the fake tensors of DTensor's sharding
      propagation hold no memory);
    * operators run on other threads (the mode is thread-local), except those of the side
      threads registered with :mod:`hetplan.run.setup.side_threads` (below). The counter is
      meant for CPU ranks, where the backward runs on the calling thread.

Side threads
    A rank's process may run threads beside the one that steps (the asynchronous parameter
    server's receiver and server, :mod:`hetplan.run.execute.ps_async`). Registered as a
    :class:`hetplan.run.setup.side_threads.SideThreads`, their tensors held at the entry join
    the baseline (taken between their units of work), and each unit of work they run while the
    counter is active is counted on its own thread through a mode of its own
    (:meth:`TensorBytesCounter.thread_mode`), into the same live total: ``peak_bytes`` is then
    the process's peak of live tensor bytes across the threads, wherever the operators that
    made it ran. The bookkeeping runs under one lock (not the operators themselves); the
    operator index of ``peak_held_from_start`` is the order in which the threads' operators
    were recorded.

How frees are seen
    Storages are tracked by a weak reference to the C++ ``StorageImpl``
    (``torch.multiprocessing.reductions.StorageWeakRef``), which expires exactly when the
    storage is freed, whoever held it last (a Python tensor, a tensor autograd saved for
    backward, a C++ view). Expiry has no callback, so a ``weakref.finalize`` on every Python
    tensor of a counted storage serves as a hint: once the last one the counter knows of is
    gone, the storage is checked before each following operator until it has expired (it may
    still be held from C++, e.g. by autograd's graph). A storage freed between two operators
    is thus never counted in the next operator's peak. (Python ``weakref.finalize`` on the
    storage object itself is not usable: in torch 2.13 the Python ``UntypedStorage`` object
    can die while its tensor and the memory are still alive.)

Overhead
    One Python call per ATen operator (``TorchDispatchMode``) plus a ``weakref.finalize`` per
    tensor an operator returns: about 10-13 us per operator, of which ~4 us is the dispatch
    mode itself. Measured for one training step (forward, cross-entropy, backward,
    ``Adam.step``) of an MLP with ReLU, medians of 300 interleaved steps, torch 2.13 CPU,
    2 threads:

    * 32-64-10, batch 16 (73 operators): 0.26 ms -> 1.0 ms (x3.7);
    * 256-512-512-10, batch 64 (107 operators): 2.3-3.1 ms -> 3.5-4.5 ms (x1.4-1.5);
    * 256-512-512-10, batch 4096: ~190 ms, the difference is within the run-to-run noise.

    The relative cost vanishes once operators take milliseconds. The runtime uses the counter
    only in an untimed warm-up step, so the timings are not biased.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

from hetplan.run.meters.fsdp_storage import follow_fsdp_resizes
from hetplan.run.setup import side_threads

try:
    from torch.distributed.tensor import DTensor as _DTensor
except ImportError:  # a torch built without distributed: no DTensor to decline

    class _DTensor:  # type: ignore[no-redef]
        """Stands for DTensor where torch has none (no tensor is one)."""


__all__ = ["TensorBytesCounter", "step_peak_bytes"]

# Operators whose output is a fresh tensor made outside the dispatcher (``torch.tensor``):
# their output shares the input's storage but is a new allocation of the context.
_FRESH_OPS = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default})


class _Entry:
    """One counted storage: a weak reference to it, its size and its known Python wrappers."""

    __slots__ = ("born", "nbytes", "ptr", "ref", "wrappers")

    def __init__(self, storage: Any, ptr: int, nbytes: int, born: int) -> None:
        self.ref = StorageWeakRef(storage)
        self.ptr = ptr
        self.nbytes = nbytes
        self.born = born
        """Index of the operator that allocated it (-1: the baseline)."""
        self.wrappers = 0

    def expired(self) -> bool:
        return bool(self.ref.expired())


def _tensors_in(obj: Any, acc: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or result (like ``torch.utils._pytree``'s
    ``tree_leaves`` filtered to tensors, for the containers ATen uses; several times faster)."""
    if isinstance(obj, torch.Tensor):
        acc.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _tensors_in(o, acc)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors_in(o, acc)
    return acc


def _storage_of(t: torch.Tensor) -> Any | None:
    """The tensor's untyped storage, or None for tensors without real memory."""
    if t.layout != torch.strided or t.device.type == "meta":
        return None
    if type(t) not in (torch.Tensor, nn.Parameter):
        return None  # a wrapper subclass (DTensor, a pending collective's result): no storage
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # e.g. tensors without storage
        return None


class _CountingMode(TorchDispatchMode):  # type: ignore[misc]
    """Sees every ATen operator and hands its inputs and outputs to the counter."""

    def __init__(self, counter: TensorBytesCounter) -> None:
        super().__init__()
        self._counter = counter

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if any(t is not torch.Tensor and t is not nn.Parameter for t in types):
            if any(issubclass(t, _DTensor) for t in types):
                # Declined: DTensor's own dispatch runs the op on its local tensors, and
                # those plain ops come back to this mode, counted (a tensor-parallel rank's
                # shards, its activations and its optimizer state).
                return NotImplemented
            # Another subclass (the fake tensors of DTensor's sharding propagation): no
            # memory of its own.
            return func(*args, **(kwargs or {}))
        counter = self._counter
        with counter._lock:  # the operator itself runs unlocked (it may wait on a thread)
            counting = counter._counting
            if counting:
                counter._collect()
        out = func(*args, **(kwargs or {}))
        if counting:
            with counter._lock:
                if counter._counting:  # not closed meanwhile (a side thread's late unit)
                    counter._record(func, out, args, kwargs)
        return out


class TensorBytesCounter:
    """Context manager counting live tensor-storage bytes: baseline + storages allocated inside.

    ``baseline`` (read when the context is entered) are tensors already alive whose storages
    count from the start, each storage once; the counter keeps only weak references to them.
    After (or during) the context, ``peak_bytes`` is the largest live total seen and
    ``current_bytes`` the latest; ``baseline_bytes`` is the baseline's total at entry. See the
    module's documentation for what is and is not counted.
    """

    def __init__(self, baseline: Iterable[torch.Tensor] = ()) -> None:
        self._baseline_source: Iterable[torch.Tensor] = baseline
        self.baseline_bytes = 0
        self.current_bytes = 0
        self.peak_bytes = 0
        self._live: dict[int, _Entry] = {}
        self._orphans: set[_Entry] = set()
        self._pending: list[_Entry] = []
        self._finalizers: list[weakref.finalize[Any, Any]] = []
        self._prune_at = 4096
        self._mode: _CountingMode | None = None
        self._used = False
        self._history = array("q")
        """The live total right after each operator (index = the operator's)."""
        self._resizes: contextlib.AbstractContextManager[None] | None = None
        self._lock = threading.RLock()
        """Guards the bookkeeping: side threads' operators record into it too."""
        self._counting = False
        """Between the entry and the exit: operators are counted."""

    # -- context -------------------------------------------------------------------------

    def __enter__(self) -> TensorBytesCounter:
        if self._used:
            raise RuntimeError("a TensorBytesCounter can be entered only once")
        self._used = True
        paused = side_threads.pause()  # the side threads wait between their units meanwhile
        try:
            with self._lock:
                side = [t for _, held in paused for t in held]
                for t in [*self._baseline_source, *side]:
                    if isinstance(t, torch.Tensor):
                        self._track(t, storage=_storage_of(t), fresh=True)
                self._baseline_source = ()
                self.baseline_bytes = self.current_bytes
                self.peak_bytes = self.current_bytes
                self._mode = _CountingMode(self)
                self._mode.__enter__()
                self._counting = True
                self._resizes = follow_fsdp_resizes(self)
                self._resizes.__enter__()
        finally:
            side_threads.resume(paused, self if self._counting else None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._mode is not None
        side_threads.deactivate(self)
        if self._resizes is not None:
            self._resizes.__exit__(exc_type, exc, tb)
            self._resizes = None
        self._mode.__exit__(exc_type, exc, tb)
        with self._lock:
            self._mode = None
            self._collect()
            self._counting = False
            for fin in self._finalizers:
                fin.detach()
            self._finalizers.clear()
            self._live.clear()
            self._orphans.clear()
            self._pending.clear()

    @contextlib.contextmanager
    def thread_mode(self) -> Iterator[None]:
        """Count the calling thread's operators into this counter for the block (a side
        thread's unit of work, :mod:`hetplan.run.setup.side_threads`). Its own mode, pushed on
        this thread's mode stack directly: ``TorchDispatchMode.__enter__``/``__exit__`` also
        save and restore process-wide flags, which interleaved entries and exits on two
        threads would leave wrong."""
        mode = _CountingMode(self)
        _push_mode(mode)
        try:
            yield
        finally:
            _pop_mode()

    # -- bookkeeping ---------------------------------------------------------------------

    def _wrapper_gone(self, entry: _Entry) -> None:
        # Called by weakref.finalize, possibly in the middle of anything: only append.
        self._pending.append(entry)

    def _collect(self) -> None:
        """Account the frees: check storages whose known wrappers are all gone."""
        pending = self._pending
        while pending:
            entry = pending.pop()
            entry.wrappers -= 1
            if entry.wrappers <= 0 and self._live.get(entry.ptr) is entry:
                self._orphans.add(entry)
        if not self._orphans:
            return
        for entry in [e for e in self._orphans if e.expired()]:
            self._orphans.discard(entry)
            self._drop(entry)

    def _drop(self, entry: _Entry) -> None:
        if self._live.get(entry.ptr) is entry:
            del self._live[entry.ptr]
            self.current_bytes -= entry.nbytes

    def _watch(self, t: torch.Tensor, entry: _Entry) -> None:
        entry.wrappers += 1
        self._finalizers.append(weakref.finalize(t, self._wrapper_gone, entry))
        if len(self._finalizers) > self._prune_at:  # forget the finalizers that already ran
            self._finalizers = [f for f in self._finalizers if f.alive]
            self._prune_at = max(4096, 2 * len(self._finalizers))

    def _track(self, t: torch.Tensor, storage: Any | None, fresh: bool) -> None:
        """Count ``t``'s storage if it is new; ``fresh``: an unknown storage is an allocation
        of the context (else an alias of something older, not counted)."""
        if storage is None:
            return
        ptr = int(storage.data_ptr())
        entry = self._live.get(ptr)
        if entry is not None and entry.expired():  # freed, and its address reused
            self._orphans.discard(entry)
            self._drop(entry)
            entry = None
        if entry is None:
            nbytes = int(storage.nbytes())
            if not fresh or nbytes == 0:
                return
            entry = _Entry(storage, ptr, nbytes, len(self._history) if self._mode else -1)
            self._live[ptr] = entry
            self.current_bytes += nbytes
        self._watch(t, entry)

    def storage_allocated(self, tensor: torch.Tensor) -> None:
        """``tensor``'s storage was just given memory by a resize (FSDP2's gathered
        buffers, :mod:`hetplan.run.meters.fsdp_storage`): counted as an allocation."""
        with self._lock:
            self._track(tensor, _storage_of(tensor), fresh=True)
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)

    def storage_freeing(self, tensor: torch.Tensor) -> None:
        """``tensor``'s storage is about to be resized to nothing: no longer counted."""
        storage = _storage_of(tensor)
        with self._lock:
            entry = None if storage is None else self._live.get(int(storage.data_ptr()))
            if entry is not None:
                self._orphans.discard(entry)
                self._drop(entry)

    def _record(self, func: Any, out: Any, args: Any, kwargs: Any) -> None:
        outputs = _tensors_in(out, [])
        if outputs:
            inputs = _tensors_in(kwargs, _tensors_in(args, []))
            input_ptrs: set[int] | None = None
            fresh_op = func in _FRESH_OPS
            for t in outputs:
                if not fresh_op and any(t is i for i in inputs):
                    continue  # in-place: the same wrapper, already known (or not counted)
                storage = _storage_of(t)
                if storage is None:
                    continue
                if fresh_op:
                    fresh = True
                else:
                    if input_ptrs is None:
                        input_ptrs = set()
                        for i in inputs:
                            s = _storage_of(i)
                            if s is not None:
                                input_ptrs.add(int(s.data_ptr()))
                    fresh = int(storage.data_ptr()) not in input_ptrs
                self._track(t, storage, fresh)
        self._history.append(self.current_bytes)
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)

    # -- queries -------------------------------------------------------------------------

    def peak_held_from_start(self, tensors: Iterable[torch.Tensor]) -> int:
        """The peak had the storages of ``tensors`` that the context allocated (and that are
        still alive) been alive since it was entered: each one's bytes added at every
        operator before the one that allocated it. Call it inside the context; tensors of the
        baseline, or that the counter never saw, change nothing."""
        with self._lock:
            return self._peak_held_from_start(tensors)

    def _peak_held_from_start(self, tensors: Iterable[torch.Tensor]) -> int:
        late: dict[int, _Entry] = {}
        for t in tensors:
            storage = _storage_of(t) if isinstance(t, torch.Tensor) else None
            entry = None if storage is None else self._live.get(int(storage.data_ptr()))
            if entry is not None and entry.born >= 0 and not entry.expired():
                late[entry.ptr] = entry
        births = sorted((e.born, e.nbytes) for e in late.values())
        missing = sum(n for _, n in births)  # not yet allocated at the entry
        peak = self.baseline_bytes + missing
        k = 0
        for op, live in enumerate(self._history):
            while k < len(births) and births[k][0] <= op:
                missing -= births[k][1]
                k += 1
            peak = max(peak, live + missing)
        return peak


def step_peak_bytes(
    run_step: Callable[[], None],
    baseline: Iterable[torch.Tensor],
    held_from_start: Callable[[], Iterable[torch.Tensor]] | None = None,
) -> int:
    """Run ``run_step`` once under a :class:`TensorBytesCounter` and return its peak bytes
    (baseline storages + storages allocated by the step); with ``held_from_start`` (called
    after the step), the peak had the storages of the tensors it returns been alive from the
    start (:meth:`TensorBytesCounter.peak_held_from_start`)."""
    with TensorBytesCounter(baseline) as counter:
        run_step()
        if held_from_start is not None:
            return counter.peak_held_from_start(held_from_start())
    return counter.peak_bytes
